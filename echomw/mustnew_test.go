package echomw_test

// mustNew returns v, or panics with err: constructors in tests are given
// valid arguments, so an error is a bug in the test.
func mustNew[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
