package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// point is one run's figure for one bar: the category on the x axis (a
// driver or a backend) and the series it belongs to (a setting, or "").
type point struct {
	category, series string
	value            float64
}

// stat summarises the runs behind one bar: their median, as bench's tables
// print it, and their range.
type stat struct {
	med, lo, hi float64
	n           int // runs; 0: the category has no run in this series
}

// series is one bar per category of its panel, in one colour.
type series struct {
	name  string
	stats []stat
}

// summarize returns the median, minimum and maximum of v. The median of an
// even number of runs is the mean of the middle two.
func summarize(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return stat{med: m, lo: s[0], hi: s[len(s)-1], n: len(s)}
}

// collect turns points into the categories and series of a panel. Points
// whose value is negative or not a number are unknown figures and are left
// out; a category or series left with no point is dropped. Categories and
// series are sorted by their rank functions (then by name).
func collect(pts []point, catRank, serRank func(string) int) ([]string, []series) {
	values := map[[2]string][]float64{}
	var cats, sers []string
	for _, p := range pts {
		if p.value < 0 || math.IsNaN(p.value) || math.IsInf(p.value, 0) {
			continue
		}
		k := [2]string{p.category, p.series}
		values[k] = append(values[k], p.value)
		if !slices.Contains(cats, p.category) {
			cats = append(cats, p.category)
		}
		if !slices.Contains(sers, p.series) {
			sers = append(sers, p.series)
		}
	}
	byRank := func(rank func(string) int) func(a, b string) int {
		return func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b)) }
	}
	slices.SortFunc(cats, byRank(catRank))
	slices.SortFunc(sers, byRank(serRank))
	out := make([]series, len(sers))
	for j, s := range sers {
		out[j] = series{name: s, stats: make([]stat, len(cats))}
		for i, c := range cats {
			out[j].stats[i] = summarize(values[[2]string{c, s}])
		}
	}
	return cats, out
}

// driverOrder is the order of bench's tables (its registry's order field);
// drivers not listed, the primitives among them, follow in name order.
var driverOrder = []string{"raw", "redislock", "redsync", "redsync5",
	"latchkey", "latchkey-norenew", "latchkey-fair", "latchkey-redlock5"}

// driverRank ranks a row label ("redsync retry=1ms") by its driver.
func driverRank(label string) int {
	d, _, _ := strings.Cut(label, " ")
	if i := slices.Index(driverOrder, d); i >= 0 {
		return i
	}
	return len(driverOrder)
}

// backendOrder is the order of bench's backend tables.
var backendOrder = []string{"redis", "postgres", "mariadb", "sqlite", "etcd", "zookeeper", "memcached"}

func backendRank(name string) int {
	if i := slices.Index(backendOrder, name); i >= 0 {
		return i
	}
	return len(backendOrder)
}

// setting names a contended table by its goroutines and whether they pause
// after each release; settingRank puts them in bench's table order: greedy
// before think, greedy by goroutines descending, think ascending.
func setting(r record) string {
	if r.ThinkUS > 0 {
		return fmt.Sprintf("%d goroutines, think %s µs", r.Workers, num(r.ThinkUS))
	}
	return fmt.Sprintf("%d goroutines, greedy", r.Workers)
}

func settingRank(s string) int {
	var workers int
	fmt.Sscanf(s, "%d", &workers)
	if strings.Contains(s, "think") {
		return 1_000_000 + workers
	}
	return 1_000_000 - workers
}

// noRank keeps names in name order.
func noRank(string) int { return 0 }

// baseline returns the median of the category "raw" in the first series
// of a panel, or 0.
func baseline(cats []string, ss []series) float64 {
	i := slices.Index(cats, "raw")
	if i < 0 || len(ss) == 0 {
		return 0
	}
	return ss[0].stats[i].med
}

// num formats with about three significant digits, as bench's tables do.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
