package console

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A day whose clearing cost the cache more than it saved is a savings bar below the zero line,
// and a day that saved is one above it.
func TestMoneyChartDrawsNegativeNetSavingsBelowZero(t *testing.T) {
	svg := string(barChart([]dayPoint{
		{Day: "2026-12-01", Cost: 0.02, Savings: 0.01},
		{Day: "2026-12-02", Cost: 0.02, Savings: -0.005},
	}))
	axis := regexp.MustCompile(`<line x1="\d+" y1="([\d.]+)"`).FindStringSubmatch(svg)
	if axis == nil {
		t.Fatalf("no zero line:\n%s", svg)
	}
	zero, _ := strconv.ParseFloat(axis[1], 64)
	rects := regexp.MustCompile(`<rect class="(savings[^"]*)" x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"><title>(\S+)`).FindAllStringSubmatch(svg, -1)
	if len(rects) != 2 {
		t.Fatalf("savings bars: %v\n%s", rects, svg)
	}
	for _, r := range rects {
		y, _ := strconv.ParseFloat(r[2], 64)
		hgt, _ := strconv.ParseFloat(r[3], 64)
		switch r[4] {
		case "2026-12-01":
			if r[1] != "savings" || y+hgt != zero || hgt <= 0 {
				t.Errorf("the day that saved: class %q from %v to %v, zero at %v", r[1], y, y+hgt, zero)
			}
		case "2026-12-02":
			if r[1] != "savings negative" || y != zero || hgt <= 0 {
				t.Errorf("the day that lost: class %q from %v to %v, zero at %v", r[1], y, y+hgt, zero)
			}
		}
	}
	if !strings.Contains(svg, "-$0.0050") {
		t.Error("the chart does not label its negative end")
	}
}
