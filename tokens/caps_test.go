package tokens

import (
	"bytes"
	"testing"
	"time"
)

func TestWriteReportTableShowsSpendAgainstCaps(t *testing.T) {
	reset := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	rows := []CapRow{
		{Tenant: "acme", Period: "daily", Bucket: "2026-12-03", Spent: 12_345_000_000, Cap: 50 * NanosPerUSD, Utilization: 0.2469, ResetsAt: reset},
		{Tenant: "acme", User: "0a1b2c3d", Period: "daily", Bucket: "2026-12-03", Spent: 5_100_000_000, Cap: 5 * NanosPerUSD, Utilization: 1.02, ResetsAt: reset},
	}
	var b bytes.Buffer
	if err := WriteCapsTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := `
SPEND AGAINST CAPS
TENANT  USER      PERIOD  BUCKET      SPENT_USD  CAP_USD    USED  RESETS
acme    (tenant)  daily   2026-12-03  12.345000    50.00   24.7%  2026-12-04T00:00:00Z
acme    0a1b2c3d  daily   2026-12-03   5.100000     5.00  102.0%  2026-12-04T00:00:00Z
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteReportTable(&b, Report{}); err != nil || bytes.Contains(b.Bytes(), []byte("CAPS")) {
		t.Errorf("a report without caps has no caps table: %q %v", b.String(), err)
	}
}
