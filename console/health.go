package console

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/apierr"
)

type healthData struct {
	Checks []Check
	Reload reloadView
	Errors []errorCount
}

type errorCount struct {
	Status int
	Type   string
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

// errorCounts sums ctxproxy_requests_total by error status, for the
// tenants the session may see.
func (c *Console) errorCounts(r *http.Request) []errorCount {
	if c.cfg.Metrics == nil {
		return nil
	}
	mfs, err := c.cfg.Metrics.Gather()
	if err != nil {
		return nil
	}
	s, _ := session(r)
	by := map[int]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ctxproxy_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var tenant string
			status := 0
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "tenant":
					tenant = lp.GetValue()
				case "status":
					status, _ = strconv.Atoi(lp.GetValue())
				}
			}
			if status >= 400 && s.who.May(tenant) && m.GetCounter().GetValue() > 0 {
				by[status] += m.GetCounter().GetValue()
			}
		}
	}
	var out []errorCount
	for st, n := range by {
		out = append(out, errorCount{Status: st, Type: errorType(st), Count: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Status < out[j].Status })
	return out
}

// errorType names what a client got for status: the API's error.type, or
// 499 for a client that went away first.
func errorType(status int) string {
	if status == 499 {
		return "client closed the request"
	}
	return apierr.Type(status)
}
