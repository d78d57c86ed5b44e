package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePlot draws calls/s and p99 latency against workers, one colour per
// batch size, toolgate solid and the raw JetStream baseline dashed, and
// writes it as PNG.
func WritePlot(w io.Writer, r *Results) error {
	throughput, err := metricPlot(r, MetricThroughput, "calls per second", "calls/s", false)
	if err != nil {
		return err
	}
	p99, err := metricPlot(r, MetricP99, "p99 latency, publish to follow-up", "ms (log)", true)
	if err != nil {
		return err
	}
	img := vgimg.New(26*vg.Centimeter, 11*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3,
		PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	plots := [][]*plot.Plot{{throughput, p99}}
	canvases := plot.Align(plots, tiles, dc)
	throughput.Draw(canvases[0][0])
	p99.Draw(canvases[0][1])
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

func metricPlot(r *Results, metric, title, ylabel string, logY bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "workers"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = decadeTicks{}
	}
	var batches []int
	for _, row := range r.Cases {
		if row.Metric == metric && !slices.Contains(batches, row.Batch) {
			batches = append(batches, row.Batch)
		}
	}
	slices.Sort(batches)
	workers := map[int]bool{}
	for i, b := range batches {
		for _, side := range []struct {
			name   string
			dashed bool
			value  func(Row) *float64
		}{
			{"raw", true, func(r Row) *float64 { return r.Raw }},
			{"toolgate", false, func(r Row) *float64 { return r.Toolgate }},
		} {
			var xys plotter.XYs
			for _, row := range r.Cases {
				v := side.value(row)
				if row.Metric != metric || row.Batch != b || v == nil || (logY && *v <= 0) {
					continue
				}
				xys = append(xys, plotter.XY{X: float64(row.Workers), Y: *v})
				workers[row.Workers] = true
			}
			if len(xys) == 0 {
				continue
			}
			slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("plot %s: %w", metric, err)
			}
			c := plotutil.Color(i)
			line.Color, points.Color = c, c
			line.Width = vg.Points(1.5)
			points.Shape = plotutil.Shape(i)
			if side.dashed {
				line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				line.Color = fade(c)
			}
			p.Add(line, points)
			p.Legend.Add(fmt.Sprintf("%s, batch %d", side.name, b), line, points)
		}
	}
	var ticks []plot.Tick
	for w := range workers {
		ticks = append(ticks, plot.Tick{Value: float64(w), Label: fmt.Sprint(w)})
	}
	slices.SortFunc(ticks, func(a, b plot.Tick) int { return int(a.Value - b.Value) })
	if len(ticks) > 0 {
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	}
	switch {
	case len(workers) == 0:
		// Nothing measured: an empty frame rather than a degenerate range.
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 1, 8, 1, 10
	case !logY:
		p.Y.Min = 0
	}
	return p, nil
}

// fade lightens a colour for the baseline lines.
func fade(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8((v>>8)/2 + 128) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 255}
}

// decadeTicks labels 1, 2 and 5 times each power of ten in range: a latency
// axis often spans less than one decade, where plot.LogTicks labels nothing.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := d * m; v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ticks
}
