package limits

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/policy"
)

// Bucket is the calendar bucket of period that t falls in, in UTC: its key (YYYY-MM-DD, YYYY-Www
// for the ISO week, YYYY-MM; the three forms never collide) and the instant the next one starts.
func Bucket(p policy.Period, t time.Time) (key string, reset time.Time) {
	w := bucketOf(p, t)
	return w.key, w.reset
}

// bucketOf is Bucket's window of t. Every admission asks for the bucket it is in: the last one
// of each period is kept, with its reset as the reply's headers write it.
func bucketOf(p policy.Period, t time.Time) *bucketWindow {
	var c *atomic.Pointer[bucketWindow]
	switch p {
	case policy.Daily:
		c = &lastBucket[0]
	case policy.Weekly:
		c = &lastBucket[1]
	case policy.Monthly:
		c = &lastBucket[2]
	}
	if c != nil {
		if w := c.Load(); w != nil && !t.Before(w.start) && t.Before(w.reset) {
			return w
		}
	}
	key, start, reset := bucket(p, t)
	w := &bucketWindow{key: key, start: start, reset: reset, resetText: strconv.FormatInt(reset.Unix(), 10)}
	if c != nil {
		c.Store(w)
	}
	return w
}

// bucketWindow is one bucket: its key and [start, reset), and reset in Unix seconds as text.
type bucketWindow struct {
	key          string
	start, reset time.Time
	resetText    string
}

var lastBucket [3]atomic.Pointer[bucketWindow] // daily, weekly, monthly

// bucket is Bucket worked out, with the bucket's start.
func bucket(p policy.Period, t time.Time) (key string, start, reset time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	switch p {
	case policy.Daily:
		return day.Format("2006-01-02"), day, day.AddDate(0, 0, 1)
	case policy.Weekly:
		iy, iw := t.ISOWeek()
		// ISO weeks start on Monday.
		monday := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		return fmt.Sprintf("%04d-W%02d", iy, iw), monday, monday.AddDate(0, 0, 7)
	case policy.Monthly:
		first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return first.Format("2006-01"), first, first.AddDate(0, 1, 0)
	}
	panic("limits: unknown period " + string(p))
}
