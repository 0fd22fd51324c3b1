package main

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// dial connects to one gateway for read-only calls.
func dial(addr string) (byzlogv1.GatewayClient, func(), error) {
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("gateway %s: %w", addr, err)
	}
	return byzlogv1.NewGatewayClient(c), func() { _ = c.Close() }, nil
}
