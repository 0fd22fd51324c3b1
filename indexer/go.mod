module github.com/byzlog/byzlog/indexer

go 1.26.0
