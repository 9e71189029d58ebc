package main

import (
	"bytes"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Sizes of a figure, in points: each panel is a row, with its legend in a
// column of its own on the right so that it never covers a bar.
const (
	figureWidth  = 740
	legendWidth  = 185
	panelHeight  = 235
	barGroupSpan = 0.8 // of the space between two categories
)

// palette is Okabe and Ito's, told apart with any colour vision.
var palette = []color.Color{
	color.RGBA{0x00, 0x72, 0xB2, 0xff}, // blue
	color.RGBA{0xE6, 0x9F, 0x00, 0xff}, // orange
	color.RGBA{0x00, 0x9E, 0x73, 0xff}, // green
	color.RGBA{0xCC, 0x79, 0xA7, 0xff}, // purple
	color.RGBA{0x56, 0xB4, 0xE9, 0xff}, // sky blue
	color.RGBA{0xD5, 0x5E, 0x00, 0xff}, // vermilion
}

var (
	targetColor  = color.RGBA{0xB0, 0x00, 0x20, 0xff}
	whiskerColor = color.Gray{0x30}
)

// The charts are set in Liberation Sans, whose widths are Arial's: the
// SVG names Arial and Helvetica after it (see render), so a viewer
// without Liberation keeps the layout.
func init() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
}

// render draws a figure as an SVG document.
func render(f figure) ([]byte, error) {
	h := vg.Length(panelHeight * len(f.panels))
	c := vgsvg.New(figureWidth, h)
	dc := draw.New(c)
	plotArea := draw.Crop(dc, 0, -legendWidth, 0, 0)
	legendArea := draw.Crop(dc, figureWidth-legendWidth, 0, 0, 0)
	tiles := draw.Tiles{Rows: len(f.panels), Cols: 1, PadTop: 6, PadBottom: 4, PadLeft: 4, PadRight: 8, PadY: 14}

	plots := make([][]*plot.Plot, len(f.panels))
	legends := make([]plot.Legend, len(f.panels))
	for i, p := range f.panels {
		plots[i] = []*plot.Plot{newPlot(p, &legends[i], i == len(f.panels)-1)}
	}
	canvases := plot.Align(plots, tiles, plotArea)
	for i := range f.panels {
		plots[i][0].Draw(canvases[i][0])
		lc := tiles.At(legendArea, 0, i)
		legends[i].Draw(draw.Crop(lc, 0, 0, 0, -28)) // below the panel's title
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")), nil
}

// newPlot builds one panel's plot, and its legend entries in leg. The
// bottom panel of a figure says how to read the bars.
func newPlot(pn panel, leg *plot.Legend, bottom bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = pn.title
	p.Title.TextStyle.Font.Size = 11
	p.Y.Label.Text = pn.yLabel
	p.Y.Label.TextStyle.Font.Size = 10
	p.X.Tick.Label.Font.Size = 9
	p.Y.Tick.Label.Font.Size = 9
	names := make([]string, len(pn.categories))
	for i, c := range pn.categories {
		names[i] = tickLabel(c)
	}
	p.NominalX(names...)
	if bottom {
		p.X.Label.Text = "bar or dot: the median of the runs; whisker: from the least to the most"
	}
	p.X.Label.TextStyle.Font.Size = 8
	p.X.Label.TextStyle.Color = color.Gray{0x60}

	*leg = plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font.Size = 9
	leg.ThumbnailWidth = 16
	leg.Padding = vg.Points(4)

	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)

	k := len(pn.series)
	width := barGroupSpan / float64(k)
	for j, s := range pn.series {
		xs := make([]float64, len(pn.categories))
		for i := range xs {
			xs[i] = float64(i) - barGroupSpan/2 + width*(float64(j)+0.5)
		}
		b := &bars{xs: xs, stats: s.stats, width: width * 0.85, color: palette[j%len(palette)],
			dots: pn.log, labels: k <= 2}
		p.Add(b)
		if s.name != "" {
			leg.Add(s.name, b)
		}
	}
	for _, t := range pn.targets {
		l := &hline{value: t.value}
		p.Add(l)
		leg.Add(t.name, l)
	}

	lo, hi := yRange(pn)
	if pn.log {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.TickerFunc(logTicks)
		p.Y.Min, p.Y.Max = lo/1.6, hi*2.2 // room for the value labels
	} else {
		p.Y.Tick.Marker = plot.TickerFunc(linearTicks)
		p.Y.Min, p.Y.Max = 0, hi*1.15
	}
	return p
}

// yRange is the least and the most of every whisker and target of a panel.
func yRange(pn panel) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, s := range pn.series {
		for _, st := range s.stats {
			if st.n > 0 {
				lo, hi = min(lo, st.lo), max(hi, st.hi)
			}
		}
	}
	for _, t := range pn.targets {
		lo, hi = min(lo, t.value), max(hi, t.value)
	}
	if pn.log && lo <= 0 {
		lo = hi / 1000 // a zero has no place on a log axis
	}
	return lo, hi
}

// logTicks labels 1, 2 and 5 times each power of ten, and marks the others.
func logTicks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// linearTicks labels about five round values, 1, 2, 2.5 or 5 times a
// power of ten apart, and marks the halves between them.
func linearTicks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return nil
	}
	raw := (hi - lo) / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * pow
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*pow >= raw {
			step = m * pow
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step * 2); i/2*step <= hi; i++ {
		t := plot.Tick{Value: i / 2 * step}
		if int(i)%2 == 0 {
			t.Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// bars draws one series: a bar from zero to each median (or, on a log
// axis, a dot at it), a whisker over the runs' range when there was more
// than one run, and optionally the median written above.
type bars struct {
	xs     []float64
	stats  []stat
	width  float64 // in x units
	color  color.Color
	dots   bool
	labels bool
}

var _ plot.Plotter = (*bars)(nil)
var _ plot.DataRanger = (*bars)(nil)
var _ plot.Thumbnailer = (*bars)(nil)

func (b *bars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	whisker := draw.LineStyle{Color: whiskerColor, Width: vg.Points(1)}
	label := draw.TextStyle{Color: color.Gray{0x20}, Font: font.From(plot.DefaultFont, 8),
		Handler: p.Title.TextStyle.Handler, XAlign: draw.XCenter}
	for i, s := range b.stats {
		if s.n == 0 {
			continue
		}
		x := trX(b.xs[i])
		if b.dots {
			c.DrawGlyph(draw.GlyphStyle{Color: b.color, Radius: vg.Points(3.5), Shape: draw.CircleGlyph{}},
				vg.Point{X: x, Y: trY(s.med)})
		} else {
			x0, x1 := trX(b.xs[i]-b.width/2), trX(b.xs[i]+b.width/2)
			y0, y1 := trY(0), trY(s.med)
			c.FillPolygon(b.color, c.ClipPolygonY([]vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}))
		}
		top := trY(s.med)
		if s.n > 1 && s.hi > s.lo {
			lo, hi := trY(s.lo), trY(s.hi)
			capW := min(x-trX(b.xs[i]-b.width/4), vg.Points(4))
			c.StrokeLine2(whisker, x, lo, x, hi)
			c.StrokeLine2(whisker, x-capW, lo, x+capW, lo)
			c.StrokeLine2(whisker, x-capW, hi, x+capW, hi)
			top = max(top, hi)
		}
		if b.labels {
			c.FillText(label, vg.Point{X: x, Y: top + vg.Points(3)}, num(s.med))
		}
	}
}

func (b *bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = -0.5, float64(len(b.xs))-0.5
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, s := range b.stats {
		if s.n > 0 {
			ymin, ymax = min(ymin, s.lo), max(ymax, s.hi)
		}
	}
	if !b.dots {
		ymin = 0
	}
	return xmin, xmax, ymin, ymax
}

func (b *bars) Thumbnail(c *draw.Canvas) {
	if b.dots {
		c.DrawGlyph(draw.GlyphStyle{Color: b.color, Radius: vg.Points(3.5), Shape: draw.CircleGlyph{}}, c.Center())
		return
	}
	r := c.Rectangle
	c.FillPolygon(b.color, []vg.Point{r.Min, {X: r.Min.X, Y: r.Max.Y}, r.Max, {X: r.Max.X, Y: r.Min.Y}})
}

// hline is a target: a dashed line across the panel.
type hline struct{ value float64 }

var _ plot.Plotter = (*hline)(nil)
var _ plot.Thumbnailer = (*hline)(nil)

func (h *hline) style() draw.LineStyle {
	return draw.LineStyle{Color: targetColor, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(5), vg.Points(3)}}
}

func (h *hline) Plot(c draw.Canvas, p *plot.Plot) {
	_, trY := p.Transforms(&c)
	y := trY(h.value)
	c.StrokeLine2(h.style(), c.Min.X, y, c.Max.X, y)
}

func (h *hline) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(h.style(), c.Min.X, y, c.Max.X, y)
}
