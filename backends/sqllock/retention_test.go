package sqllock_test

import (
	"testing"

	"github.com/latchkey/latchkey/backends/sqllock"
)

// A released lease keeps its row, and so its fence, for the retention:
// cleanup right after the release must not delete it.
func TestReleasedRowKeepsFence(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			opt := table(t, db)
			c := newClient(t, db, opt, sqllock.WithCleanupEvery(0))
			ctx := ctxT(t)
			l, err := c.TryLock(ctx, "kept")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := sqllock.Cleanup(ctx, db, opt); err != nil {
				t.Fatal(err)
			}
			info, err := c.Inspect(ctx, "kept")
			if err != nil {
				t.Fatal(err)
			}
			if info.Fence != l.Fence() {
				t.Fatalf("after a release and a cleanup Inspect says fence %d, want the last one issued, %d", info.Fence, l.Fence())
			}
		})
	}
}
