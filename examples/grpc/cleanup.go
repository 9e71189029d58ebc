package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// deleteKeys removes the demo's keys from a real Redis.
func deleteKeys(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}
