package limits

import (
	"fmt"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
)

// Bucket is the calendar bucket of period that t falls in, in UTC: its key (YYYY-MM-DD, YYYY-Www
// for the ISO week, YYYY-MM; the three forms never collide) and the instant the next one starts.
func Bucket(p policy.Period, t time.Time) (key string, reset time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	switch p {
	case policy.Daily:
		return day.Format("2006-01-02"), day.AddDate(0, 0, 1)
	case policy.Weekly:
		iy, iw := t.ISOWeek()
		// ISO weeks start on Monday.
		monday := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		return fmt.Sprintf("%04d-W%02d", iy, iw), monday.AddDate(0, 0, 7)
	case policy.Monthly:
		first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return first.Format("2006-01"), first.AddDate(0, 1, 0)
	}
	panic("limits: unknown period " + string(p))
}
