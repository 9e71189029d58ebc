package core

import "strings"

// hashTag is the part of a Redis key that Cluster hashes: the bytes
// between the first '{' and the next '}', if that is not empty, else the
// whole key.
func hashTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return key
}

// clusterSlot is the Redis Cluster hash slot of a key: CRC16 (XMODEM) of
// its hash tag, mod 16384.
func clusterSlot(key string) uint16 {
	tag := hashTag(key)
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
