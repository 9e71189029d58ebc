package cronlock

// Plan exposes plan to the external tests.
var Plan = plan
