package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseRequestLog(t *testing.T) {
	log := strings.Join([]string{
		`ctxproxy: {"level":"info","time":"2026-12-04T12:00:00.001Z","msg":"ctxproxy listening","addr":"127.0.0.1:1"}`,
		// A memory round: 2 upstream calls.
		`ctxproxy: {"level":"info","time":"2026-12-04T12:00:01.0005Z","msg":"request","status":200,"duration":"500µs","upstream_duration":"300µs","upstream_calls":2,"memory_rounds_duration":"50µs","memory_commands":1}`,
		// Three rounds.
		`{"level":"info","time":"2026-12-04T12:00:02.001Z","msg":"request","status":200,"duration":"1ms","upstream_duration":"400µs","upstream_calls":4,"memory_rounds_duration":"210µs","memory_commands":3}`,
		// No round.
		`{"level":"info","time":"2026-12-04T12:00:03.0001Z","msg":"request","status":200,"duration":"100µs","upstream_duration":"60µs","upstream_calls":1}`,
		// Failed: not counted.
		`{"level":"info","time":"2026-12-04T12:00:04Z","msg":"request","status":502,"duration":"1ms","upstream_duration":"1ms","upstream_calls":1}`,
		`not json`,
	}, "\n")
	recs, err := parseRequestLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339Nano, s); return v }
	want := []reqRecord{
		{at: at("2026-12-04T12:00:01Z"), own: 200 * time.Microsecond, rounds: 1, roundOwn: 50 * time.Microsecond},
		{at: at("2026-12-04T12:00:02Z"), own: 600 * time.Microsecond, rounds: 3, roundOwn: 210 * time.Microsecond},
		{at: at("2026-12-04T12:00:03Z"), own: 40 * time.Microsecond, rounds: 0},
	}
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		if !recs[i].at.Equal(w.at) || recs[i].own != w.own || recs[i].rounds != w.rounds || recs[i].roundOwn != w.roundOwn {
			t.Errorf("record %d = %+v, want %+v", i, recs[i], w)
		}
	}

	t0 := at("2026-12-04T12:00:00Z")
	tests := []struct {
		name     string
		from, to time.Time
		measure  ownMeasure
		want     []time.Duration
	}{
		{"per request, all", t0, t0.Add(time.Hour), perRequest, []time.Duration{40 * time.Microsecond, 200 * time.Microsecond, 600 * time.Microsecond}},
		{"per round, the rounds' own work", t0, t0.Add(time.Hour), perRound, []time.Duration{50 * time.Microsecond, 70 * time.Microsecond}},
		{"per round, the request's whole own time", t0, t0.Add(time.Hour), perRoundWhole, []time.Duration{200 * time.Microsecond, 200 * time.Microsecond}},
		{"per round, by start time", t0.Add(1500 * time.Millisecond), t0.Add(time.Hour), perRoundWhole, []time.Duration{200 * time.Microsecond}},
		{"end excluded", t0, t0.Add(time.Second), perRequest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ownTimes(recs, tt.from, tt.to, tt.measure)
			if len(got) != len(tt.want) {
				t.Fatalf("ownTimes = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("ownTimes = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestParseRequestLogBadDuration(t *testing.T) {
	_, err := parseRequestLog(strings.NewReader(`{"msg":"request","status":200,"duration":"0.5","upstream_duration":"1ms"}`))
	if err == nil {
		t.Fatal("a duration without a unit was accepted")
	}
}

func TestParseRequestLogRoundsWithoutTheirDuration(t *testing.T) {
	_, err := parseRequestLog(strings.NewReader(`{"msg":"request","status":200,"duration":"1ms","upstream_duration":"500µs","upstream_calls":2}`))
	if err == nil {
		t.Fatal("a request with a memory round and no memory_rounds_duration was accepted")
	}
}
