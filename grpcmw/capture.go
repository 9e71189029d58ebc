package grpcmw

import (
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// capture is the grpc.ServerTransportStream a handler sees under
// Idempotency: it passes the header and trailer metadata the handler sets
// (grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer) to the call's own
// stream and keeps a copy, to store with the result.
type capture struct {
	inner  grpc.ServerTransportStream // nil when called outside a server
	method string

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

var _ grpc.ServerTransportStream = (*capture)(nil)

func (c *capture) Method() string {
	if c.inner != nil {
		return c.inner.Method()
	}
	return c.method
}

func (c *capture) SetHeader(md metadata.MD) error {
	if c.inner != nil {
		if err := c.inner.SetHeader(md); err != nil {
			return err
		}
	}
	c.keep(&c.header, md)
	return nil
}

func (c *capture) SendHeader(md metadata.MD) error {
	if c.inner != nil {
		if err := c.inner.SendHeader(md); err != nil {
			return err
		}
	}
	c.keep(&c.header, md)
	return nil
}

func (c *capture) SetTrailer(md metadata.MD) error {
	if c.inner != nil {
		if err := c.inner.SetTrailer(md); err != nil {
			return err
		}
	}
	c.keep(&c.trailer, md)
	return nil
}

// keep adds md to *dst, as the transport merges it; the replay marker is
// never kept.
func (c *capture) keep(dst *metadata.MD, md metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, vs := range md {
		if k == MetadataReplayed || len(vs) == 0 {
			continue
		}
		if *dst == nil {
			*dst = metadata.MD{}
		}
		k = strings.ToLower(k)
		(*dst)[k] = append((*dst)[k], vs...)
	}
}

// metadata returns copies of what was kept.
func (c *capture) metadata() (header, trailer metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.header.Copy(), c.trailer.Copy()
}
