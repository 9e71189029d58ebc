// Package testpb is the test service of package grpcmw, generated from
// stock.proto by protoc with protoc-gen-go and protoc-gen-go-grpc:
//
//	apt-get install -y protobuf-compiler
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
//	go generate ./internal/testpb
package testpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative stock.proto
