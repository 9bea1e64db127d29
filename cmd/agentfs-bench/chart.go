package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart: for each workload a group of bars, one per filesystem other
// than native, each the ratio to native on a log scale, drawn from the
// line at 1.0 (up: slower than native, down: faster).
const (
	chartHeight   = 560
	chartLeft     = 70 // room for the y ticks
	chartRight    = 30
	chartTop      = 70 // title and legend
	chartBottom   = 75 // workload names and the footnote
	chartBarWidth = 30
	chartBarGap   = 4
	chartGroupPad = 26
)

var (
	chartBackground = color.RGBA{0xff, 0xff, 0xff, 0xff}
	chartInk        = color.RGBA{0x22, 0x22, 0x22, 0xff}
	chartGrid       = color.RGBA{0xe2, 0xe2, 0xe2, 0xff}
	chartBaseline   = color.RGBA{0xc0, 0x20, 0x20, 0xff}
	chartColors     = map[string]color.RGBA{
		fsOverlayfs:       {0x4c, 0x72, 0xb0, 0xff},
		fsFuseOverlayfs:   {0xdd, 0x84, 0x52, 0xff},
		fsAgentfs:         {0x55, 0xa8, 0x68, 0xff},
		fsAgentfsUntraced: {0xa8, 0xd8, 0x9c, 0xff}, // agentfs's, lighter
		fsAgentfsNohash:   {0x2e, 0x7d, 0x46, 0xff}, // agentfs's, darker
		fsAgentfsBaseline: {0x81, 0x72, 0xb3, 0xff},
		fsAgentfsQuota:    {0x2e, 0x6b, 0x3c, 0xff}, // agentfs's, darker
	}
	chartOther = color.RGBA{0x88, 0x88, 0x88, 0xff}
)

// chartTicks are the y values that may get a tick, from which those in
// range are drawn.
var chartTicks = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}

// chartPNG draws the ratios as a PNG. Copy-up is left out, with its
// times in a footnote: native has nothing to copy, so its ratio (in the
// thousands) says nothing and would squash the other bars.
func (r *report) chartPNG() ([]byte, error) {
	var series []string
	for _, filesystem := range r.order() {
		if filesystem != fsNative && !boundVariant(filesystem) { // its own table
			series = append(series, filesystem)
		}
	}
	var workloads []*workloadResult
	for _, w := range r.Workloads {
		if w.Name != copyUpWorkload {
			workloads = append(workloads, w)
		}
	}
	groupWidth := max(len(series), 1)*(chartBarWidth+chartBarGap) - chartBarGap + chartGroupPad
	width := max(chartLeft+len(workloads)*groupWidth+chartRight, 760)
	img := image.NewRGBA(image.Rect(0, 0, width, chartHeight))
	fill(img, img.Bounds(), chartBackground)

	lo, hi := chartRange(workloads, series)
	plotTop, plotBottom := chartTop, chartHeight-chartBottom
	y := func(q float64) int {
		f := (math.Log10(q) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		return plotBottom - int(math.Round(f*float64(plotBottom-plotTop)))
	}

	drawText(img, chartLeft, 20, chartInk, "agentfs-bench: time as a ratio to native (log scale; lower is faster)")
	legendX := chartLeft
	for _, filesystem := range series {
		fill(img, image.Rect(legendX, 34, legendX+12, 46), seriesColor(filesystem))
		legendX += 18 + drawText(img, legendX+18, 45, chartInk, filesystem) + 16
	}
	dashed(img, legendX, legendX+14, 40)
	drawText(img, legendX+18, 45, chartBaseline, "native = 1")
	for _, t := range chartTicks {
		if t < lo || t > hi {
			continue
		}
		ty := y(t)
		fill(img, image.Rect(chartLeft, ty, width-chartRight, ty+1), chartGrid)
		label := fmt.Sprintf("%gx", t)
		drawText(img, chartLeft-8-textWidth(label), ty+4, chartInk, label)
	}
	fill(img, image.Rect(chartLeft-1, plotTop, chartLeft, plotBottom+1), chartInk)

	base := y(1)
	for i, w := range workloads {
		gx := chartLeft + i*groupWidth + chartGroupPad/2
		name := w.Name
		drawText(img, gx+(groupWidth-chartGroupPad-textWidth(name))/2, plotBottom+20, chartInk, name)
		for j, filesystem := range series {
			bx := gx + j*(chartBarWidth+chartBarGap)
			res := w.Results[filesystem]
			if res == nil || res.Ratio == nil {
				label := "n/a"
				if w.Skipped == "" && res != nil && res.Error != "" {
					label = "fail"
				}
				drawText(img, bx+(chartBarWidth-textWidth(label))/2, base-4, chartOther, label)
				continue
			}
			q := *res.Ratio
			by := y(math.Min(math.Max(q, lo), hi))
			top, bottom := min(by, base), max(by, base)
			if bottom-top < 2 {
				top, bottom = base-1, base+1
			}
			fill(img, image.Rect(bx, top, bx+chartBarWidth, bottom), seriesColor(filesystem))
			label := chartLabel(q)
			lx := bx + (chartBarWidth-textWidth(label))/2
			if q >= 1 {
				drawText(img, lx, top-3, chartInk, label)
			} else {
				drawText(img, lx, bottom+12, chartInk, label)
			}
		}
	}
	if len(workloads) == 0 {
		drawText(img, chartLeft+20, base-8, chartInk, "No workload of the first table ran (see results.md).")
	}
	dashed(img, chartLeft, width-chartRight, base) // the line at 1.0, over the bars
	if note := r.copyUpSummary(); note != "" {
		drawText(img, chartLeft, chartHeight-12, chartInk, "Not shown: "+note+".")
	}

	var out bytes.Buffer
	if err := png.Encode(&out, img); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// chartRange is the y range: the ticks just outside the smallest and
// largest ratio (with room for their labels), and at least 0.5 to 2.
func chartRange(workloads []*workloadResult, series []string) (lo, hi float64) {
	least, most := 0.5, 2.0
	for _, w := range workloads {
		for _, filesystem := range series {
			if res := w.Results[filesystem]; res != nil && res.Ratio != nil && *res.Ratio > 0 {
				// Room for the label below or above the bar.
				least, most = math.Min(least, *res.Ratio/1.15), math.Max(most, *res.Ratio*1.15)
			}
		}
	}
	lo, hi = chartTicks[0], chartTicks[len(chartTicks)-1]
	for _, t := range chartTicks {
		if t <= least {
			lo = t
		}
		if t >= most && hi == chartTicks[len(chartTicks)-1] {
			hi = t
		}
	}
	return lo, hi
}

func chartLabel(q float64) string {
	if q >= 10 {
		return fmt.Sprintf("%.0f", q)
	}
	return fmt.Sprintf("%.1f", q)
}

func seriesColor(filesystem string) color.RGBA {
	if c, ok := chartColors[filesystem]; ok {
		return c
	}
	return chartOther
}

// dashed draws the baseline's dashed line from x0 to x1 at y.
func dashed(img draw.Image, x0, x1, y int) {
	for x := x0; x < x1; x += 8 {
		fill(img, image.Rect(x, y-1, min(x+5, x1), y+1), chartBaseline)
	}
}

func fill(img draw.Image, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// drawText draws s with its baseline at y and returns its width.
func drawText(img draw.Image, x, y int, c color.Color, s string) int {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
	return textWidth(s)
}

func textWidth(s string) int {
	return font.MeasureString(basicfont.Face7x13, s).Round()
}
