package otel

// LeasesTracked returns how many leases in's lease table holds.
func LeasesTracked(in *Instrumentation) int { return in.leases.len() }
