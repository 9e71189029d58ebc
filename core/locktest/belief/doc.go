// Package belief checks, under faults, the lock's promise on any
// *core.Client: a holder is told it lost its lease (Lost closes,
// Observer.LeaseLost runs) no later than anyone else can take its key.
//
// A run opens several Clients, each on a connection to the store of its
// own, and lets workers lock random keys through random Clients, hold
// them (often across renewals), sometimes extend them, and release them,
// while an injector makes the faults the caller provides — a Client's
// connections cut or stalled, the server restarted — one at a time. Every
// holder's belief is recorded: from Lock's return to Release's call or
// the loss, whichever came first (the loss time comes from the Observer
// the run installs on each Client). Then referees judge:
//
//   - overlap: on one key, a belief must end before the next begins, up
//     to the allowance — the lease's drift margin (core's default,
//     min(ttl/100+2ms, ttl/10), unless Config.Margin says otherwise; the
//     holder is told at least that long before the store's expiry) plus
//     Config.Slack for the test process's own scheduling under -race;
//   - fences: on one key, fences rise strictly in the order the beliefs
//     began (a belief lost within Slack of Lock's return is left out: it
//     held nothing and says nothing about order);
//   - sanity: a run that acquired too little (Config.MinAcquired, and at
//     least one attempt in ten), that was given faults and made none, or
//     whose harness failed (a fault that could not be made, an Observer
//     not installed) fails — a checker that checked nothing must not pass.
//
// The injector makes each kind of fault once first, in a random order,
// then picks by Fault.Weight; a fault is lifted before the next is made,
// and when the run ends. The faults are the caller's: for a fault on one
// Client, give each Client its own TCP proxy to the server (this
// repository's tests use internal/faultnet: Cut, Stall, Reset; elsewhere
// any proxy, such as toxiproxy, does).
//
// Run it from a test of the backend:
//
//	func TestBelief(t *testing.T) {
//		belief.Run(t, belief.Config{
//			Open: func(i int, obs core.Observer) (*core.Client, error) {
//				return mybackend.New(connect(t, proxies[i].Addr()), core.WithObserver(obs))
//			},
//			Faults: []belief.Fault{{Name: "cut", Min: 100 * time.Millisecond, Max: time.Second,
//				Inject: func(i int) (func(), error) { return proxies[i].Cut(), nil }}},
//		})
//	}
//
// A run's choices (keys, TTLs, holds, which fault hits which Client when)
// come from its seed, which Run prints: LATCHKEY_SEED=<n> replays them
// (the interleavings of goroutines still vary). LATCHKEY_BELIEF_DURATION
// sets a run's length (default 8 s; make soak runs minutes).
package belief
