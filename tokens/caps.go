package tokens

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// CapRow is one spend cap and what is spent against it in its current period. The
// counters live in the limits store, not the ledger; package limits builds these rows.
type CapRow struct {
	Tenant      string    `json:"tenant"`
	User        string    `json:"user,omitempty"` // the end user of a per-user cap; "" for the tenant's
	Period      string    `json:"period"`         // daily, weekly, monthly
	Bucket      string    `json:"bucket"`         // YYYY-MM-DD, YYYY-Www, YYYY-MM (UTC)
	Spent       Money     `json:"spent_usd"`
	Cap         Money     `json:"cap_usd"`
	Utilization float64   `json:"utilization"` // spent / cap
	ResetsAt    time.Time `json:"resets_at"`
}

// CapsFunc lists the caps of tenant ("" for every tenant) with their current spend.
type CapsFunc func(ctx context.Context, tenant string) ([]CapRow, error)

// WithCaps adds spend against caps to the report ("caps").
func WithCaps(fn CapsFunc) HandlerOption {
	return func(c *handlerConfig) { c.caps = fn }
}

// WriteCapsTable writes rows as an aligned table under a title line; nothing when there are none.
func WriteCapsTable(w io.Writer, rows []CapRow) error {
	if len(rows) == 0 {
		return nil
	}
	lines := [][]string{{"TENANT", "USER", "PERIOD", "BUCKET", "SPENT_USD", "CAP_USD", "USED", "RESETS"}}
	for _, r := range rows {
		user := r.User
		if user == "" {
			user = "(tenant)"
		}
		lines = append(lines, []string{r.Tenant, user, r.Period, r.Bucket, r.Spent.Fixed(6), r.Cap.Fixed(2),
			fmt.Sprintf("%.1f%%", r.Utilization*100), r.ResetsAt.UTC().Format(time.RFC3339)})
	}
	width := make([]int, len(lines[0]))
	for _, l := range lines {
		for i, c := range l {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	b.WriteString("\nSPEND AGAINST CAPS\n")
	for _, l := range lines {
		var line strings.Builder
		for i, c := range l {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i >= 4 && i <= 6 { // amounts right-aligned
				line.WriteString(pad + c)
			} else {
				line.WriteString(c + pad)
			}
			line.WriteString("  ")
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
