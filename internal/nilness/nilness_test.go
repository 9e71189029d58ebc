package nilness_test

import (
	"io"
	"testing"
	"unsafe"

	"github.com/latchkey/latchkey/internal/nilness"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type store struct{ n int }

func (s *store) Read([]byte) (int, error) { return s.n, nil }

type funcReader func([]byte) (int, error)

func (f funcReader) Read(p []byte) (int, error) { return f(p) }

func TestIsNil(t *testing.T) {
	var (
		nilStore  *store
		nilReader io.Reader
		nilFunc   funcReader
		nilMap    map[string]int
		nilSlice  []int
		nilChan   chan int
		nilUnsafe unsafe.Pointer
		x         = 1
	)
	cases := []struct {
		name string
		v    any
		want bool
	}{
		{"nil interface", nil, true},
		{"nil io.Reader", nilReader, true},
		{"typed nil pointer", nilStore, true},
		{"typed nil pointer as io.Reader", io.Reader(nilStore), true},
		{"typed nil func", nilFunc, true},
		{"typed nil func as io.Reader", io.Reader(nilFunc), true},
		{"nil map", nilMap, true},
		{"nil slice", nilSlice, true},
		{"nil chan", nilChan, true},
		{"nil unsafe.Pointer", nilUnsafe, true},
		{"pointer", &store{}, false},
		{"pointer as io.Reader", io.Reader(&store{}), false},
		{"func", funcReader(func([]byte) (int, error) { return 0, io.EOF }), false},
		{"empty map", map[string]int{}, false},
		{"empty slice", []int{}, false},
		{"chan", make(chan int), false},
		{"unsafe.Pointer", unsafe.Pointer(&x), false},
		{"struct", store{}, false},
		{"zero int", 0, false},
		{"empty string", "", false},
	}
	for _, c := range cases {
		if got := nilness.IsNil(c.v); got != c.want {
			t.Errorf("%s: IsNil = %v, want %v", c.name, got, c.want)
		}
	}
}
