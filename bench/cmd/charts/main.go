// Command charts draws SVG charts from the JSONL files that bench writes
// with -out: the lock matrix (serial, parallel, contended, handoff per
// driver), the primitives section, and the backend comparison. Each input
// results/<name>.jsonl gives results/<name>-<chart>.svg, or
// results/<name>.svg when it holds one chart only.
//
//	go run ./cmd/charts results/final-20261122.jsonl results/backends-20261126.jsonl
//
// The charts show what the files hold: the median of each row's runs as a
// bar (or a dot, on a log axis), the runs' range as a whisker, and the
// project's targets as dashed lines. `make bench-report` runs it on the
// files that bench/README.md cites.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	outDir := flag.String("o", "", "directory for the SVG files (default: each input's own)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: charts [-o dir] results.jsonl...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, in := range flag.Args() {
		if err := chartFile(in, *outDir); err != nil {
			fmt.Fprintln(os.Stderr, "charts:", err)
			os.Exit(1)
		}
	}
}

// chartFile writes the charts of one results file.
func chartFile(in, outDir string) error {
	rs, err := readRecords(in)
	if err != nil {
		return err
	}
	fs := figures(rs)
	if len(fs) == 0 {
		return fmt.Errorf("%s: nothing to chart", in)
	}
	if outDir == "" {
		outDir = filepath.Dir(in)
	}
	stem := strings.TrimSuffix(filepath.Base(in), filepath.Ext(in))
	for _, f := range fs {
		name := stem + "-" + f.name + ".svg"
		if len(fs) == 1 {
			name = stem + ".svg"
		}
		svg, err := render(f)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		path := filepath.Join(outDir, name)
		if err := os.WriteFile(path, svg, 0o644); err != nil {
			return err
		}
		fmt.Println(path)
	}
	return nil
}
