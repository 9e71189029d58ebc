// Package shoppb is the shop service of the grpc example, generated from
// shop.proto by protoc with protoc-gen-go and protoc-gen-go-grpc (see
// grpcmw/internal/testpb for the versions and how to install them).
package shoppb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative shop.proto
