package main

import (
	"bytes"
	"encoding/xml"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want stat
	}{
		{nil, stat{}},
		{[]float64{7}, stat{med: 7, lo: 7, hi: 7, n: 1}},
		{[]float64{3, 1, 2}, stat{med: 2, lo: 1, hi: 3, n: 3}},
		{[]float64{4, 1, 3, 2}, stat{med: 2.5, lo: 1, hi: 4, n: 4}},
	} {
		if got := summarize(tc.in); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestCollectOrdersAndDropsUnknowns(t *testing.T) {
	pts := []point{
		{"latchkey", "b", 30}, {"raw", "b", 10}, {"latchkey", "a", 5},
		{"latchkey", "b", 50}, {"raw", "a", -1}, // unknown: left out
		{"redsync retry=1ms", "a", math.NaN()}, // unknown, and its category with it
		{"raw", "b", 12},
	}
	rankAB := func(s string) int { return map[string]int{"b": 0, "a": 1}[s] }
	cats, ss := collect(pts, driverRank, rankAB)
	if !slices.Equal(cats, []string{"raw", "latchkey"}) {
		t.Fatalf("categories %q, want raw then latchkey", cats)
	}
	if len(ss) != 2 || ss[0].name != "b" || ss[1].name != "a" {
		t.Fatalf("series %+v, want b then a", ss)
	}
	want := [][]stat{
		{{med: 11, lo: 10, hi: 12, n: 2}, {med: 40, lo: 30, hi: 50, n: 2}},
		{{}, {med: 5, lo: 5, hi: 5, n: 1}}, // raw has no known "a"
	}
	for j := range ss {
		if !slices.Equal(ss[j].stats, want[j]) {
			t.Errorf("series %q: %+v, want %+v", ss[j].name, ss[j].stats, want[j])
		}
	}
}

// matrixRuns is two rounds of a small lock matrix, as bench writes it.
func matrixRuns() []record {
	var rs []record
	for round, f := range []float64{1, 1.5} {
		rs = append(rs,
			record{Scenario: "ping", Label: "go-redis", P50: 25},
			record{Scenario: "serial", Driver: "raw", Label: "raw", Keys: "cycle", P50: 40 * f},
			record{Scenario: "serial", Driver: "latchkey", Label: "latchkey", Keys: "cycle", P50: 60 * f},
			record{Scenario: "serial", Driver: "latchkey", Label: "latchkey", Keys: "cycle", Pair: "raw", P50: 60 * f, PairP50: 50 * f},
			record{Scenario: "serial", Driver: "latchkey", Label: "latchkey", Keys: "goroutine", Pair: "raw", P50: 66, PairP50: 60},
			record{Scenario: "parallel", Driver: "raw", Label: "raw", Workers: 16, Keys: "cycle", Rate: 20000 * f, ClientCPU: 30, RedisCPU: 20},
			record{Scenario: "parallel", Driver: "latchkey", Label: "latchkey", Workers: 16, Keys: "cycle", Rate: 15000 * f, ClientCPU: 50, RedisCPU: -1},
			record{Scenario: "contended", Driver: "raw", Label: "raw", Workers: 8, Rate: 600, WaitP99: 48000, HandoffN: 10, HandoffP50: 900},
			record{Scenario: "contended", Driver: "latchkey", Label: "latchkey", Workers: 2, ThinkUS: 500, Rate: 650,
				WaitP99: 700, HandoffN: 100, HandoffP50: 280 + float64(round)*20, HandoffP99: 560},
			record{Scenario: "contended", Driver: "redsync", Label: "redsync retry=1ms", Workers: 8, ThinkUS: 500, Rate: 500,
				WaitP99: 70000, HandoffN: 0}, // no handoff measured: no handoff dot
		)
	}
	return rs
}

func figureNamed(t *testing.T, fs []figure, name string) figure {
	t.Helper()
	for _, f := range fs {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no figure %q", name)
	return figure{}
}

func TestMatrixFigures(t *testing.T) {
	fs := figures(matrixRuns())
	var names []string
	for _, f := range fs {
		names = append(names, f.name)
	}
	if !slices.Equal(names, []string{"serial", "parallel", "contended", "handoff"}) {
		t.Fatalf("figures %q", names)
	}

	serial := figureNamed(t, fs, "serial")
	if p := serial.panels[0]; !slices.Equal(p.categories, []string{"raw", "latchkey"}) ||
		p.series[0].stats[1] != (stat{med: 75, lo: 60, hi: 90, n: 2}) {
		t.Errorf("serial panel: %q %+v", p.categories, p.series)
	}
	paired := serial.panels[1]
	if !slices.Equal(paired.categories, []string{"latchkey"}) || len(paired.series) != 2 {
		t.Fatalf("paired panel: %q, %d series", paired.categories, len(paired.series))
	}
	for _, s := range paired.series {
		want := map[string]float64{"a new key per cycle": 1.2, "one key, reused": 1.1}[s.name]
		if math.Abs(s.stats[0].med-want) > 1e-9 {
			t.Errorf("paired %q: median %v, want %v (latchkey's p50 over raw's of the same run)", s.name, s.stats[0].med, want)
		}
	}
	if len(paired.targets) != 1 || paired.targets[0].value != targetSerialRatio {
		t.Errorf("paired targets %+v", paired.targets)
	}

	parallel := figureNamed(t, fs, "parallel")
	if tg := parallel.panels[0].targets; len(tg) != 1 || tg[0].value != 0.9*25000 {
		t.Errorf("parallel target %+v, want 0.9 × raw's median 25000", tg)
	}
	cpu := parallel.panels[1]
	for _, s := range cpu.series {
		if s.name == "Redis" && s.stats[slices.Index(cpu.categories, "latchkey")].n != 0 {
			t.Errorf("latchkey's Redis CPU was unknown (-1) but has a bar")
		}
	}

	contended := figureNamed(t, fs, "contended")
	var settings []string
	for _, s := range contended.panels[0].series {
		settings = append(settings, s.name)
	}
	if !slices.Equal(settings, []string{"8 goroutines, greedy", "2 goroutines, think 500 µs", "8 goroutines, think 500 µs"}) {
		t.Errorf("contended settings %q", settings)
	}
	if !contended.panels[1].log || contended.panels[1].series[0].stats[0].med != 48 {
		t.Errorf("wait panel: log %v, raw 8 greedy %+v (want 48 ms)", contended.panels[1].log, contended.panels[1].series[0].stats[0])
	}

	handoff := figureNamed(t, fs, "handoff")
	h := handoff.panels[0]
	if !slices.Equal(h.categories, []string{"latchkey"}) || h.series[0].name != "1 waiter" ||
		h.series[0].stats[0] != (stat{med: 290, lo: 280, hi: 300, n: 2}) {
		t.Errorf("handoff p50 panel: %q %+v (only think tables with handoffs count)", h.categories, h.series)
	}
}

func TestBackendFigure(t *testing.T) {
	rs := []record{
		{Backend: "etcd", Kind: "serial", P50: 3000},
		{Backend: "redis", Kind: "serial", P50: 120},
		{Backend: "redis", Kind: "contended", Procs: 4, Rate: 600, P99: 14000},
		{Backend: "etcd", Kind: "contended", Procs: 4, Rate: 190, P99: 80000},
	}
	fs := figures(rs)
	if len(fs) != 1 || fs[0].name != "backends" || len(fs[0].panels) != 3 {
		t.Fatalf("figures %+v", fs)
	}
	p := fs[0].panels
	if !slices.Equal(p[0].categories, []string{"redis", "etcd"}) || p[2].series[0].stats[1].med != 80 {
		t.Errorf("panels %+v", p)
	}
	if !strings.Contains(p[1].title, "4 worker processes") {
		t.Errorf("contended title %q", p[1].title)
	}
}

func TestRenderIsSVG(t *testing.T) {
	for _, f := range figures(matrixRuns()) {
		svg, err := render(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(svg, new(struct{})); err != nil {
			t.Errorf("%s: not XML: %v", f.name, err)
		}
		if !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte(">latchkey<")) {
			t.Errorf("%s: no svg element or no latchkey label", f.name)
		}
		if bytes.Contains(svg, []byte("font-family:Liberation Sans;")) {
			t.Errorf("%s: font family without a fallback", f.name)
		}
	}
}

// TestCheckedInResults reads every results file of the repository, so that
// a change to bench's JSON fields that the charts read shows here.
func TestCheckedInResults(t *testing.T) {
	files, err := filepath.Glob("../../results/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no results files: %v", err)
	}
	for _, name := range files {
		rs, err := readRecords(name)
		if err != nil {
			t.Fatal(err)
		}
		fs := figures(rs)
		if len(fs) == 0 {
			t.Errorf("%s: no chart", name)
		}
		for _, f := range fs {
			for _, p := range f.panels {
				for _, s := range p.series {
					for _, st := range s.stats {
						if st.n > 0 && !(st.med > 0) {
							t.Errorf("%s, %s: a bar of %v", name, p.title, st.med)
						}
					}
				}
			}
		}
	}
}

// The scale sweep gives a figure per curve, sizes in numeric order, and
// its fleets stay out of the lock matrix's contended panels.
func TestScaleFigures(t *testing.T) {
	rs := []record{
		{Scenario: "renew", Driver: "latchkey", Leases: 100000, ClientPct: 36, RedisPct: 48},
		{Scenario: "renew", Driver: "latchkey", Leases: 1000, ClientPct: 1, RedisPct: -1},
		{Scenario: "renew", Driver: "latchkey", Leases: 400000, ClientPct: 90, RedisPct: 95},
		{Scenario: "contended", Driver: "latchkey", Clients: 500, Workers: 10000, WaitP99: 14e6},
		{Scenario: "contended", Driver: "latchkey", Clients: 5, Workers: 100, LockKeys: 1000, WaitP99: 3e3},
		{Scenario: "contended", Driver: "latchkey", Clients: 10, Workers: 20, LockKeys: 10, Rate: 4000},
		{Scenario: "memory", Driver: "latchkey", Ops: 1000, BytesPerKey: 170},
	}
	var names []string
	for _, f := range figures(rs) {
		names = append(names, f.name)
		if f.name == "contended" {
			t.Errorf("fleets drawn as the matrix's contended runs")
		}
	}
	if want := []string{"renew", "waiters", "clients", "memory"}; !slices.Equal(names, want) {
		t.Fatalf("figures %q, want %q", names, want)
	}
	renew := scaleFigures(rs)[0].panels[0]
	if !slices.Equal(renew.categories, []string{"1,000", "100,000", "400,000"}) {
		t.Errorf("renew sizes %q", renew.categories)
	}
	if len(renew.series) != 2 || renew.series[1].stats[0].n != 0 {
		t.Errorf("an unknown Redis figure was drawn: %+v", renew.series)
	}
	waiters := scaleFigures(rs)[1].panels[0]
	if len(waiters.series) != 2 || waiters.series[0].name != "1 key" || waiters.series[1].name != "1,000 keys" {
		t.Errorf("waiter series %+v", waiters.series)
	}
	if _, err := render(scaleFigures(rs)[0]); err != nil {
		t.Fatal(err)
	}
}
