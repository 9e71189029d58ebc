//go:build !linux

package main

import "os"

// ttyWidth: no ioctl here; $COLUMNS or the default width applies.
func ttyWidth(*os.File) int { return 0 }
