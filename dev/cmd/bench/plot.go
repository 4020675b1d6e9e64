package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The plot's colours: fanout's scenarios, the floor, the second series.
var (
	barColor    = color.RGBA{R: 0x2b, G: 0x6c, B: 0xb0, A: 0xff}
	floorColor  = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
	secondColor = color.RGBA{R: 0xe0, G: 0x7b, B: 0x39, A: 0xff}
)

// writePlot writes the rows as an SVG plot to path (-plot): deliveries/s
// per scenario beside the floor's, the latency percentiles of the rows
// that have them, and the scaling scenario's deliveries/s by workers.
func writePlot(path string, rows []Row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := renderPlot(f, rows); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// renderPlot draws the plots that have data, one above the other.
func renderPlot(w io.Writer, rows []Row) error {
	var plots []*plot.Plot
	for _, mk := range []func([]Row) (*plot.Plot, error){throughputPlot, latencyPlot, scalingPlot} {
		p, err := mk(rows)
		if err != nil {
			return err
		}
		if p != nil {
			plots = append(plots, p)
		}
	}
	if len(plots) == 0 {
		return fmt.Errorf("plot: no row has deliveries/s, latencies or scaling")
	}
	const width, height = 9 * vg.Inch, 4 * vg.Inch
	c := vgsvg.New(width, height*vg.Length(len(plots)))
	dc := draw.New(c)
	grid := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8), PadY: vg.Points(16)}
	canvases := plot.Align(grid, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	_, err := c.WriteTo(w)
	return err
}

// throughputPlot: deliveries/s per scenario, the floor's bar grey and its
// level a dashed line across.
func throughputPlot(rows []Row) (*plot.Plot, error) {
	var names []string
	var vals, floor plotter.Values
	floorRate := 0.0
	for _, r := range rows {
		if r.DeliveriesPerSec <= 0 {
			continue
		}
		names = append(names, r.Scenario)
		if r.Scenario == "floor" {
			floorRate = r.DeliveriesPerSec
			vals, floor = append(vals, 0), append(floor, r.DeliveriesPerSec)
		} else {
			vals, floor = append(vals, r.DeliveriesPerSec), append(floor, 0)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Throughput per scenario"
	p.Y.Label.Text = "deliveries/s"
	p.Y.Min = 0
	bw := barWidth(len(names))
	bars, err := plotter.NewBarChart(vals, bw)
	if err != nil {
		return nil, err
	}
	bars.Color, bars.LineStyle.Width = barColor, 0
	p.Add(bars)
	p.Legend.Add("fanout", bars)
	if floorRate > 0 {
		fb, err := plotter.NewBarChart(floor, bw)
		if err != nil {
			return nil, err
		}
		fb.Color, fb.LineStyle.Width = floorColor, 0
		line := plotter.NewFunction(func(float64) float64 { return floorRate })
		line.Dashes, line.Color, line.Width = []vg.Length{vg.Points(4), vg.Points(3)}, floorColor, vg.Points(1)
		line.XMin, line.XMax = -0.5, float64(len(names))-0.5
		p.Add(fb, line)
		p.Legend.Add("floor (client and sink alone)", fb)
	}
	p.Legend.Top = true
	p.Y.Max = headroom(append(vals, floor...))
	nominal(p, names)
	return p, nil
}

// headroom is the Y axis's top: a fifth above the highest value, so that
// the legend stays clear of the bars.
func headroom(vals plotter.Values) float64 {
	top := 0.0
	for _, v := range vals {
		top = math.Max(top, v)
	}
	return top * 1.25
}

// latencyPlot: p50 and p99 side by side for the rows that measured them.
func latencyPlot(rows []Row) (*plot.Plot, error) {
	var names []string
	var p50, p99 plotter.Values
	for _, r := range rows {
		if r.P50Ms <= 0 && r.P99Ms <= 0 {
			continue
		}
		names = append(names, r.Scenario)
		p50, p99 = append(p50, r.P50Ms), append(p99, r.P99Ms)
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Latency from publish to the last delivery of an event"
	p.Y.Label.Text = "ms"
	p.Y.Min = 0
	bw := barWidth(len(names)) / 2
	b50, err := plotter.NewBarChart(p50, bw)
	if err != nil {
		return nil, err
	}
	b99, err := plotter.NewBarChart(p99, bw)
	if err != nil {
		return nil, err
	}
	b50.Color, b50.LineStyle.Width, b50.Offset = barColor, 0, -bw/2
	b99.Color, b99.LineStyle.Width, b99.Offset = secondColor, 0, bw/2
	p.Add(b50, b99)
	p.Legend.Add("p50", b50)
	p.Legend.Add("p99", b99)
	p.Legend.Top = true
	p.Y.Max = headroom(append(p50, p99...))
	nominal(p, names)
	return p, nil
}

// scalingNote is how the scaling scenario's notes give each run:
// "1 worker(s) 1234/s".
var scalingNote = regexp.MustCompile(`(\d+) worker\(s\) (\d+(?:\.\d+)?)/s`)

// scalingPlot: deliveries/s by workers from the scaling row's notes, and
// the linear line through one worker's rate.
func scalingPlot(rows []Row) (*plot.Plot, error) {
	var pts plotter.XYs
	for _, r := range rows {
		if r.Scenario != "scaling" {
			continue
		}
		for _, m := range scalingNote.FindAllStringSubmatch(r.Notes, -1) {
			k, _ := strconv.Atoi(m[1])
			v, _ := strconv.ParseFloat(m[2], 64)
			pts = append(pts, plotter.XY{X: float64(k), Y: v})
		}
	}
	if len(pts) < 2 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "scaling: delivery workers against a slow destination"
	p.X.Label.Text = "delivery workers"
	p.Y.Label.Text = "deliveries/s"
	p.X.Min, p.Y.Min = 0, 0
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, err
	}
	line.Color, points.Color, line.Width = barColor, barColor, vg.Points(2)
	one := pts[0].Y / pts[0].X
	top := one * pts[len(pts)-1].X
	for _, pt := range pts {
		top = math.Max(top, pt.Y)
	}
	p.Y.Max = top * 1.1 // the linear line drawn to the end, above the measured one
	ideal := plotter.NewFunction(func(x float64) float64 { return one * x })
	ideal.Dashes, ideal.Color = []vg.Length{vg.Points(4), vg.Points(3)}, floorColor
	ideal.XMin, ideal.XMax = 0, pts[len(pts)-1].X
	p.Add(line, points, ideal)
	p.Legend.Add("measured", line, points)
	p.Legend.Add("linear", ideal)
	p.Legend.Top, p.Legend.Left = true, true
	ticks := make([]plot.Tick, len(pts))
	for i, pt := range pts {
		ticks[i] = plot.Tick{Value: pt.X, Label: strconv.Itoa(int(pt.X))}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p, nil
}

// nominal names the bars on the X axis, slanted when there are many.
func nominal(p *plot.Plot, names []string) {
	p.NominalX(names...)
	if len(names) > 5 {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
}

// barWidth fits n bars in the plot's width.
func barWidth(n int) vg.Length {
	return vg.Length(math.Max(8, math.Min(40, 480/float64(n))))
}
