package console

import (
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/tokens"
)

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

type moneyData struct {
	Days    int
	Models  []tokens.Row // by model, over the range
	Total   tokens.Totals
	Chart   template.HTML // inline SVG: cost and savings by day
	ByDay   []dayPoint
	Spend   []tokens.CapRow
	SpendEr string
	NoData  bool
}

type dayPoint struct {
	Day           string
	Cost, Savings float64
}

// moneyPage is a tenant's cost and savings by day and by model, and its
// spend against caps.
func (c *Console) moneyPage(w http.ResponseWriter, r *http.Request) {
	p := c.cfg.Policies.Current().Tenant(r.PathValue("tenant"))
	d := moneyData{Days: 30}
	d.Spend, d.SpendEr = c.spend(r, p)
	if c.cfg.Ledger == nil {
		d.NoData = true
		c.render(w, r, "money", http.StatusOK, page{Title: p.Tenant + " · money", Tenant: p.Tenant, Data: d})
		return
	}
	now := c.cfg.Now().UTC()
	since := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, -(d.Days - 1))
	f := tokens.Filter{Tenant: p.Tenant, Since: since}
	byDay, err := tokens.RunReport(r.Context(), c.cfg.Ledger, f, "day")
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, "The ledger could not be read: "+err.Error())
		return
	}
	byModel, err := tokens.RunReport(r.Context(), c.cfg.Ledger, f, "model")
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, "The ledger could not be read: "+err.Error())
		return
	}
	d.Models, d.Total = byModel.Rows, byModel.Total
	sort.SliceStable(d.Models, func(i, j int) bool { return d.Models[i].CostUSD > d.Models[j].CostUSD })
	got := map[string]tokens.Row{}
	for _, row := range byDay.Rows {
		got[row.Group] = row
	}
	for i := 0; i < d.Days; i++ {
		day := since.AddDate(0, 0, i).Format("2006-01-02")
		row := got[day]
		d.ByDay = append(d.ByDay, dayPoint{Day: day, Cost: row.CostUSD.USD(), Savings: row.SavingsUSD.USD()})
	}
	d.Chart = barChart(d.ByDay)
	c.render(w, r, "money", http.StatusOK, page{Title: p.Tenant + " · money", Tenant: p.Tenant, Data: d})
}

// barChart draws cost and net savings per day as paired bars, on the server:
// the page needs no script and no external request. Net savings below zero
// (a clearing that cost the cache more than it saved) are bars below the zero
// line.
func barChart(pts []dayPoint) template.HTML {
	const w, h, pad, left = 720, 220, 24, 64
	maxV, minV := 0.0, 0.0
	for _, p := range pts {
		maxV = max(maxV, p.Cost, p.Savings)
		minV = min(minV, p.Savings)
	}
	span := maxV - minV
	zero := float64(h) // the y of $0
	if span > 0 {
		zero = pad + maxV/span*float64(h-pad)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="Cost and net savings by day">`, w, h+40)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="axis"/>`, left, zero, w-pad, zero)
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="tick">$%.4f</text><text x="%d" y="%.1f" class="tick">$0</text>`, 2, pad, maxV, 2, zero)
	if minV < 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="tick">-$%.4f</text>`, 2, h, -minV)
	}
	if span > 0 && len(pts) > 0 {
		slot := float64(w-pad-left) / float64(len(pts))
		bw := slot * 0.4
		for i, p := range pts {
			x := float64(left) + slot*float64(i) + slot*0.1
			for j, v := range []float64{p.Cost, p.Savings} {
				bh := (max(v, -v) / span) * float64(h-pad)
				cls := [2]string{"cost", "savings"}[j]
				y := zero - bh
				if v < 0 {
					cls, y = "savings negative", zero
				}
				fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s %s $%.6f</title></rect>`,
					cls, x+bw*float64(j), y, bw, bh, p.Day, [2]string{"cost", "net savings"}[j], v)
			}
			if i%7 == 0 || (i == len(pts)-1 && i%7 >= 3) {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="tick">%s</text>`, x, h+16, p.Day[5:])
			}
		}
	}
	fmt.Fprintf(&b, `<rect class="cost" x="%d" y="%d" width="10" height="10"/><text x="%d" y="%d" class="tick">cost</text>`, left, h+26, left+14, h+35)
	fmt.Fprintf(&b, `<rect class="savings" x="%d" y="%d" width="10" height="10"/><text x="%d" y="%d" class="tick">net savings (context editing, after its cache penalty)</text>`, left+70, h+26, left+84, h+35)
	b.WriteString(`</svg>`)
	// Every value written above is a number or a date the code formatted.
	return template.HTML(b.String())
}
