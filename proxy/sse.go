package proxy

import (
	"bytes"
	"errors"
	"io"
)

// sseEvent is one server-sent event as it came off the wire. Raw holds the
// whole event including its terminating blank line, so an event the proxy does
// not change is relayed byte for byte. Name and Data alias Raw.
type sseEvent struct {
	Raw  []byte
	Name []byte
	Data []byte
}

// sseReader splits an SSE stream into events. Its one buffer both takes the
// reads and holds the events, which alias it: no line is copied, and an
// event is only valid until the next call to Next.
type sseReader struct {
	r          io.Reader
	buf        []byte // buf[start:end] is read and not yet returned
	start, end int
	data       []byte // joined data lines when an event has several
	max        int
}

// maxSSEEvent bounds one event; the largest real ones are tool inputs of a
// few hundred KB split into many deltas, so this is generous.
const maxSSEEvent = 16 << 20

// sseReadSize is the first buffer: a few events at a time, and little
// memory per open stream (it grows for a larger event).
const sseReadSize = 2 << 10

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: r, buf: make([]byte, sseReadSize), max: maxSSEEvent}
}

var errSSETooLarge = errors.New("sse event too large")

// fill reads more bytes, first moving the pending ones to the front or
// growing the buffer when there is no room.
func (s *sseReader) fill() error {
	if s.end == len(s.buf) {
		if s.start > 0 {
			s.end = copy(s.buf, s.buf[s.start:s.end])
			s.start = 0
		} else {
			nb := make([]byte, 2*len(s.buf))
			s.end = copy(nb, s.buf[s.start:s.end])
			s.buf = nb
		}
	}
	n, err := s.r.Read(s.buf[s.end:])
	s.end += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// Next returns the next event, or io.EOF at a clean end of stream. A stream
// that ends inside an event returns io.ErrUnexpectedEOF.
func (s *sseReader) Next() (sseEvent, error) {
	pos := s.start // where the next line starts, relative to buf
	for {
		nl := bytes.IndexByte(s.buf[pos:s.end], '\n')
		if nl < 0 {
			if s.end-s.start > s.max {
				return sseEvent{}, errSSETooLarge
			}
			off := pos - s.start
			if err := s.fill(); err != nil {
				if err == io.EOF {
					if s.start == s.end {
						return sseEvent{}, io.EOF
					}
					return sseEvent{}, io.ErrUnexpectedEOF
				}
				return sseEvent{}, err
			}
			pos = s.start + off
			continue
		}
		lineEnd := pos + nl + 1
		if len(trimEOL(s.buf[pos:lineEnd])) > 0 {
			pos = lineEnd
			continue
		}
		if pos == s.start { // stray blank line between events
			s.start = lineEnd
			pos = lineEnd
			continue
		}
		raw := s.buf[s.start:lineEnd]
		s.start = lineEnd
		if len(raw) > s.max {
			return sseEvent{}, errSSETooLarge
		}
		return s.parse(raw), nil
	}
}

// parse picks the event's name and data out of its lines.
func (s *sseReader) parse(raw []byte) sseEvent {
	ev := sseEvent{Raw: raw}
	dataLines := 0
	for rest := raw; len(rest) > 0; {
		nl := bytes.IndexByte(rest, '\n')
		l := trimEOL(rest[:nl+1])
		rest = rest[nl+1:]
		switch {
		case bytes.HasPrefix(l, []byte("event:")):
			ev.Name = trimSpace1(l[len("event:"):])
		case bytes.HasPrefix(l, []byte("data:")):
			v := trimSpace1(l[len("data:"):])
			dataLines++
			switch dataLines {
			case 1:
				ev.Data = v
			case 2:
				// Several data lines join with \n (the SSE rule); rare here.
				s.data = append(append(append(s.data[:0], ev.Data...), '\n'), v...)
				ev.Data = s.data
			default:
				s.data = append(append(s.data, '\n'), v...)
				ev.Data = s.data
			}
		}
	}
	return ev
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// trimSpace1 drops the single optional space after the field colon.
func trimSpace1(b []byte) []byte {
	if len(b) > 0 && b[0] == ' ' {
		return b[1:]
	}
	return b
}

// appendSSE appends an event in the API's framing.
func appendSSE(b []byte, name string, data []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}
