// Package core is a distributed lock.
package core
