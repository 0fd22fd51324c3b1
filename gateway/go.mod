module github.com/byzlog/byzlog/gateway

go 1.26.0
