package pictures

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Dashboard is the part of a Grafana dashboard.json that is drawn: its
// title and its panels (rows and time series) where gridPos puts them.
type Dashboard struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is one panel of the dashboard.
type Panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	GridPos GridPos `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// GridPos is Grafana's: 24 columns, rows of RowHeight pixels.
type GridPos struct{ H, W, X, Y int }

// ParseDashboard reads a dashboard.json.
func ParseDashboard(b []byte) (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("dashboard.json: %w", err)
	}
	if len(d.Panels) == 0 {
		return d, fmt.Errorf("dashboard.json: no panels")
	}
	return d, nil
}

// Layout of the rendered page, as Grafana lays a dashboard out.
const (
	PageWidth = 1400 // pixels
	RowHeight = 30   // pixels per gridPos unit of height
	pad       = 8
)

// queryVars are the dashboard's variables as the page renders them: every
// event type, and a range of the evaluation window.
var queryVars = strings.NewReplacer(`$event_type`, `.*`, `$__rate_interval`, `1m`)

// series is one line of a panel.
type series struct {
	Name   string
	Color  string
	Points string // SVG polyline points
}

type panelView struct {
	Row                 bool
	Title               string
	Left, Top, W, H     int
	PlotW, PlotH        int
	Series              []series
	YTicks              []tick
	XTicks              []tick
	Note                string
	LegendTop, LegendHt int
}

type tick struct {
	Pos   float64
	Label string
}

// palette is Grafana's classic series colours.
var palette = []string{"#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0", "#508642", "#cca300"}

// Render writes the dashboard as an HTML page: each panel where gridPos
// puts it, its title, and its queries evaluated over the scrapes (window:
// the scrapes a rate spans) as lines with a legend.
func Render(w io.Writer, d Dashboard, scrapes []Scrape, window int) error {
	colW := float64(PageWidth-pad) / 24
	var views []panelView
	height := 0
	for _, p := range d.Panels {
		v := panelView{Title: p.Title, Row: p.Type == "row",
			Left: int(float64(p.GridPos.X)*colW) + pad, Top: p.GridPos.Y*RowHeight + pad,
			W: int(float64(p.GridPos.W)*colW) - pad, H: p.GridPos.H*RowHeight - pad}
		height = max(height, v.Top+v.H+pad)
		if !v.Row {
			fillPanel(&v, p, scrapes, window)
		}
		views = append(views, v)
	}
	return pageTmpl.Execute(w, map[string]any{"Title": d.Title, "Panels": views, "Width": PageWidth, "Height": height})
}

// fillPanel evaluates a panel's queries and scales its lines.
func fillPanel(v *panelView, p Panel, scrapes []Scrape, window int) {
	type line struct {
		name string
		pts  []Point
	}
	var lines []line
	var errs []string
	for _, t := range p.Targets {
		pts, labels, err := Eval(queryVars.Replace(t.Expr), scrapes, window)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(pts)) {
			lines = append(lines, line{legend(t.LegendFormat, labels[k], t.Expr), pts[k]})
		}
	}
	const legendRow = 14
	v.LegendHt = min(len(lines), 4) * legendRow
	v.PlotW, v.PlotH = v.W-70, v.H-34-v.LegendHt-22
	v.LegendTop = v.PlotH + 30
	switch {
	case len(errs) > 0:
		v.Note = "not drawn: " + strings.Join(errs, "; ")
	case len(lines) == 0:
		v.Note = "no data"
	}
	if len(lines) == 0 || len(scrapes) == 0 {
		return
	}
	x0, x1 := scrapes[0].At, scrapes[len(scrapes)-1].At
	ymax := 0.0
	for _, l := range lines {
		for _, pt := range l.pts {
			ymax = math.Max(ymax, pt.Y)
		}
	}
	ymax = niceCeil(ymax)
	for i, l := range lines {
		var b strings.Builder
		for _, pt := range l.pts {
			x := (pt.X - x0) / math.Max(x1-x0, 1) * float64(v.PlotW)
			y := float64(v.PlotH) - pt.Y/ymax*float64(v.PlotH)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		v.Series = append(v.Series, series{Name: l.name, Color: palette[i%len(palette)], Points: b.String()})
	}
	unit := p.FieldConfig.Defaults.Unit
	for i := 0; i <= 4; i++ {
		val := ymax * float64(i) / 4
		v.YTicks = append(v.YTicks, tick{Pos: float64(v.PlotH) - float64(v.PlotH)*float64(i)/4, Label: format(val, unit)})
	}
	for i := 0; i <= 4; i++ {
		s := (x1 - x0) * float64(i) / 4
		v.XTicks = append(v.XTicks, tick{Pos: float64(v.PlotW) * float64(i) / 4, Label: fmt.Sprintf("%d:%02d", int(s)/60, int(s)%60)})
	}
}

var legendVar = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// legend names a line: the target's legendFormat with its labels, else
// its labels, else the query.
func legend(format string, l Labels, expr string) string {
	if format != "" {
		return legendVar.ReplaceAllStringFunc(format, func(m string) string { return l[legendVar.FindStringSubmatch(m)[1]] })
	}
	if len(l) == 0 {
		if len(expr) > 60 {
			return expr[:57] + "..."
		}
		return expr
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// format prints a value in a Grafana unit.
func format(v float64, unit string) string {
	switch unit {
	case "percentunit":
		switch {
		case v == 0 || v >= 0.1:
			return fmt.Sprintf("%.0f%%", v*100)
		case v >= 0.01:
			return fmt.Sprintf("%.1f%%", v*100)
		default:
			return fmt.Sprintf("%.2f%%", v*100)
		}
	case "s":
		switch {
		case v == 0:
			return "0"
		case v < 1:
			return fmt.Sprintf("%.0f ms", v*1000)
		default:
			return fmt.Sprintf("%.1f s", v)
		}
	case "reqps":
		return short(v) + "/s"
	default:
		return short(v)
	}
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fK", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body { margin: 0; background: #111217; color: #ccccdc; font: 12px "Liberation Sans", Arial, sans-serif; }
.page { position: relative; width: {{.Width}}px; height: {{.Height}}px; }
.panel { position: absolute; background: #181b1f; border: 1px solid #2c3235; border-radius: 2px; box-sizing: border-box; }
.row { position: absolute; font-size: 14px; font-weight: 600; color: #d8d9da; }
.title { position: absolute; left: 8px; top: 6px; font-size: 13px; font-weight: 500; color: #d8d9da; }
.note { position: absolute; left: 8px; top: 40px; right: 8px; color: #8e8e8e; font-size: 11px; overflow-wrap: anywhere; }
svg text { fill: #8e8e8e; font-size: 10px; }
</style></head>
<body><div class="page">
{{range .Panels}}{{if .Row}}<div class="row" style="left:{{.Left}}px; top:{{.Top}}px">{{.Title}}</div>
{{else}}<div class="panel" style="left:{{.Left}}px; top:{{.Top}}px; width:{{.W}}px; height:{{.H}}px">
<div class="title">{{.Title}}</div>
{{if .Note}}<div class="note">{{.Note}}</div>{{end}}
{{if .Series}}<svg width="{{.W}}" height="{{.H}}" style="position:absolute; left:0; top:0">
<g transform="translate(60, 28)">{{$p := .}}
{{range .YTicks}}<line x1="0" x2="{{$p.PlotW}}" y1="{{.Pos}}" y2="{{.Pos}}" stroke="#2c3235" stroke-width="1"/><text x="-6" y="{{.Pos}}" dy="3" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<text x="{{.Pos}}" y="{{$p.PlotH}}" dy="13" text-anchor="middle">{{.Label}}</text>
{{end}}{{range .Series}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.5" points="{{.Points}}"/>
{{end}}</g></svg>
<div style="position:absolute; left:60px; right:8px; top:{{.LegendTop}}px; height:{{.LegendHt}}px; overflow:hidden; margin-top:22px">
{{range $i, $s := .Series}}{{if lt $i 4}}<div style="white-space:nowrap; overflow:hidden; text-overflow:ellipsis; line-height:14px"><span style="display:inline-block; width:12px; height:3px; background:{{$s.Color}}; vertical-align:middle; margin-right:4px"></span>{{$s.Name}}</div>{{end}}{{end}}
</div>{{end}}
</div>
{{end}}{{end}}
</div></body></html>
`))
