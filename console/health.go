package console

import (
	"net/http"
	"sort"
	"strconv"
)

type healthData struct {
	Checks []Check
	Reload reloadView
	Errors []errorCount
}

type errorCount struct {
	Status int
	Type   string // error.type as the answer carried it, or what a 499 means
	Code   string // error.details.error_code; "" when the answer had none
	Count  float64
}

// health shows readiness (memory store, ledger, limits store), the last
// policy reload, and the error answers clients got since start, by type.
func (c *Console) health(w http.ResponseWriter, r *http.Request) {
	d := healthData{Reload: c.reload(r)}
	if c.cfg.Ready != nil {
		d.Checks = c.cfg.Ready(r.Context())
	}
	d.Errors = c.errorCounts(r)
	c.render(w, r, "health", http.StatusOK, page{Title: "Health", Data: d})
}

// errorCounts sums ctxproxy_errors_total by status, error.type and error code, for the tenants
// the session may see: each error is named by what its answer said, not guessed from its
// status (a 429 may be a rate limit or a spend limit, told apart by its code).
func (c *Console) errorCounts(r *http.Request) []errorCount {
	if c.cfg.Metrics == nil {
		return nil
	}
	mfs, err := c.cfg.Metrics.Gather()
	if err != nil {
		return nil
	}
	s, _ := session(r)
	by := map[errorCount]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ctxproxy_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var tenant string
			var k errorCount
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "tenant":
					tenant = lp.GetValue()
				case "status":
					k.Status, _ = strconv.Atoi(lp.GetValue())
				case "type":
					k.Type = lp.GetValue()
				case "code":
					k.Code = lp.GetValue()
				}
			}
			if k.Status == 499 {
				k.Type = "client closed the request"
			}
			if k.Code == "none" {
				k.Code = ""
			}
			if s.who.May(tenant) && m.GetCounter().GetValue() > 0 {
				by[k] += m.GetCounter().GetValue()
			}
		}
	}
	out := make([]errorCount, 0, len(by))
	for k, n := range by {
		k.Count = n
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Status != b.Status {
			return a.Status < b.Status
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.Code < b.Code
	})
	return out
}
