package proxy

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  []string // "name|data"
		final error
	}{
		{"reads events in order", "event: a\ndata: {\"x\":1}\n\nevent: b\ndata: 2\n\n", []string{"a|{\"x\":1}", "b|2"}, io.EOF},
		{"accepts CRLF line ends", "event: a\r\ndata: 1\r\n\r\n", []string{"a|1"}, io.EOF},
		{"accepts no space after the colon", "event:a\ndata:1\n\n", []string{"a|1"}, io.EOF},
		{"joins several data lines with newlines", "event: a\ndata: 1\ndata: 2\n\n", []string{"a|1\n2"}, io.EOF},
		{"skips stray blank lines between events", "\n\nevent: a\ndata: 1\n\n\n", []string{"a|1"}, io.EOF},
		{"keeps comment lines in the raw event", ": keepalive\nevent: a\ndata: 1\n\n", []string{"a|1"}, io.EOF},
		{"reports a stream cut inside an event", "event: a\ndata: 1\n\nevent: b\ndata: {\"par", []string{"a|1"}, io.ErrUnexpectedEOF},
		{"reports a stream cut before the blank line", "event: a\ndata: 1\n", nil, io.ErrUnexpectedEOF},
		{"reads an empty stream as a clean end", "", nil, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte at a time proves events spanning reads are reassembled.
			r := newSSEReader(iotest.OneByteReader(strings.NewReader(tt.in)))
			var got []string
			var err error
			for {
				var ev sseEvent
				ev, err = r.Next()
				if err != nil {
					break
				}
				got = append(got, string(ev.Name)+"|"+string(ev.Data))
			}
			if !errors.Is(err, tt.final) {
				t.Fatalf("final error = %v, want %v", err, tt.final)
			}
			if strings.Join(got, ";") != strings.Join(tt.want, ";") {
				t.Fatalf("events = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSSEReaderRawIsTheEventAsSent(t *testing.T) {
	in := "event: message_start\ndata: {\"a\":1}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"
	r := newSSEReader(strings.NewReader(in))
	var raw strings.Builder
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		raw.Write(ev.Raw)
	}
	if raw.String() != in {
		t.Fatalf("raw events rejoined = %q, want the input %q", raw.String(), in)
	}
}

func TestSSEReaderReadsLinesLongerThanItsBuffer(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	r := newSSEReader(strings.NewReader("event: a\ndata: " + long + "\n\n"))
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if string(ev.Data) != long {
		t.Fatalf("data has %d bytes, want %d", len(ev.Data), len(long))
	}
}

func TestSSEReaderRefusesAnEventOverItsLimit(t *testing.T) {
	r := newSSEReader(strings.NewReader("event: a\ndata: " + strings.Repeat("x", 2000) + "\n\n"))
	r.max = 1000
	if _, err := r.Next(); !errors.Is(err, errSSETooLarge) {
		t.Fatalf("err = %v, want errSSETooLarge", err)
	}
}
