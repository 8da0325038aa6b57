package advise

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ctxproxy/ctxproxy/tokens"
)

// WriteJSON writes a as indented JSON.
func WriteJSON(w io.Writer, a Advice) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}

// WriteTable writes a for a terminal: the table, the verdict, the gaps and the TTL arithmetic.
// Every cost figure says it is an estimate.
func WriteTable(w io.Writer, a Advice) error {
	window := ""
	if a.Since != nil {
		window += " from " + a.Since.UTC().Format(time.RFC3339)
	}
	if a.Until != nil {
		window += " until " + a.Until.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "tenant %s%s: %s\n\n", a.Tenant, window, a.Note)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "POLICY\tCALLS\tMEAN_INPUT_TOKENS\tCOST_PER_1000_USD (estimate)\tNET_SAVINGS_PER_1000_USD (estimate)\tCACHE_HIT_RATE\t")
	for _, r := range a.Rows {
		name := r.Policy
		if r.CompactNotMeasured {
			name += " (compact not measured)"
		}
		hit := "unknown"
		if r.CacheHitRate != nil {
			hit = strconv.FormatFloat(*r.CacheHitRate*100, 'f', 1, 64) + "%"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t\n", name, r.Calls, r.MeanInputTokens,
			r.EstimatedCostPer1000.Fixed(4), r.NetSavingsPer1000.Fixed(4), hit)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nverdict: %s\n", a.Verdict.Text)
	for _, r := range a.Rows {
		if r.CompactNotMeasured {
			fmt.Fprintf(w, "note: %s writes compact_20260112; count_tokens never compacts, so its compact settings are not measured\n", r.Policy)
		}
	}
	g := a.Gaps
	fmt.Fprintf(w, "\ngaps: %d of %d gaps between a conversation's calls (%s, over %d conversations) exceed 5 minutes; %d exceed an hour\n",
		g.Over5m, g.Gaps, pct(g.Share5m), g.Conversat, g.Over1h)
	t := a.TTL
	fmt.Fprintf(w, "cache TTL (estimate; writes W = %d, reads R = %d, re-written after a 5m-1h gap E = %d tokens, at each call's input price):\n",
		t.Writes, t.Reads, t.Kept1h)
	fmt.Fprintf(w, "  5m: 1.25 × W + 0.1 × R = 1.25 × %d + 0.1 × %d → $%s\n", t.Writes, t.Reads, t.Cost5m.Fixed(4))
	fmt.Fprintf(w, "  1h: 2 × (W − E) + 0.1 × (R + E) = 2 × %d + 0.1 × %d → $%s\n", t.Writes-t.Kept1h, t.Reads+t.Kept1h, t.Cost1h.Fixed(4))
	verdict := "5 minutes is cheaper"
	if t.Cheaper1h {
		verdict = "1 hour would have been cheaper"
	}
	fmt.Fprintf(w, "  %s by $%s (estimate)\n", verdict, absMoney(t.Cost5m-t.Cost1h).Fixed(4))
	return nil
}

func pct(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }

func absMoney(m tokens.Money) tokens.Money {
	if m < 0 {
		return -m
	}
	return m
}
