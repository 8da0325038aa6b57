package limits

import (
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
)

func TestBucketsAreUTCCalendarPeriods(t *testing.T) {
	est := time.FixedZone("EST", -5*3600)
	cases := []struct {
		name     string
		period   policy.Period
		at       time.Time
		key      string
		resetsAt string
	}{
		{"a day is its UTC date", policy.Daily, time.Date(2026, 12, 3, 23, 59, 59, 0, time.UTC), "2026-12-03", "2026-12-04T00:00:00Z"},
		{"a local evening is the next UTC day", policy.Daily, time.Date(2026, 12, 3, 20, 0, 0, 0, est), "2026-12-04", "2026-12-05T00:00:00Z"},
		{"the last day of a year resets on New Year", policy.Daily, time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC), "2026-12-31", "2027-01-01T00:00:00Z"},
		{"a Thursday's ISO week resets the next Monday", policy.Weekly, time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), "2026-W49", "2026-12-07T00:00:00Z"},
		{"a Sunday is the end of its ISO week", policy.Weekly, time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC), "2026-W49", "2026-12-07T00:00:00Z"},
		{"a Monday starts a week", policy.Weekly, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), "2026-W50", "2026-12-14T00:00:00Z"},
		{"early January can be the last ISO week of the year before", policy.Weekly, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), "2026-W53", "2027-01-04T00:00:00Z"},
		{"a month is YYYY-MM", policy.Monthly, time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC), "2026-02", "2026-03-01T00:00:00Z"},
		{"December resets in January", policy.Monthly, time.Date(2026, 12, 15, 0, 0, 0, 0, time.UTC), "2026-12", "2027-01-01T00:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, reset := Bucket(c.period, c.at)
			if key != c.key || reset.Format(time.RFC3339) != c.resetsAt {
				t.Errorf("Bucket(%s, %s) = %s, %s; want %s, %s", c.period, c.at, key, reset.Format(time.RFC3339), c.key, c.resetsAt)
			}
		})
	}
}
