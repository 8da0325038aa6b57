package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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

// sseReader splits an SSE stream into events. It reuses one buffer, so an
// event is only valid until the next call to Next.
type sseReader struct {
	br   *bufio.Reader
	buf  []byte
	data []byte // joined data lines when an event has several
	max  int
}

// maxSSEEvent bounds one event; the largest real ones are tool inputs of a
// few hundred KB split into many deltas, so this is generous.
const maxSSEEvent = 16 << 20

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 4<<10), max: maxSSEEvent}
}

var errSSETooLarge = errors.New("sse event too large")

// Next returns the next event, or io.EOF at a clean end of stream. A stream
// that ends inside an event returns io.ErrUnexpectedEOF.
func (s *sseReader) Next() (sseEvent, error) {
	s.buf = s.buf[:0]
	var ev sseEvent
	nameOff, nameLen, dataOff, dataLen, dataLines := -1, 0, 0, 0, 0
	for {
		lineStart := len(s.buf)
		for {
			chunk, err := s.br.ReadSlice('\n')
			s.buf = append(s.buf, chunk...)
			if len(s.buf) > s.max {
				return ev, errSSETooLarge
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF {
				if len(s.buf) == 0 {
					return ev, io.EOF
				}
				return ev, io.ErrUnexpectedEOF
			}
			if err != nil {
				return ev, err
			}
			break
		}
		l := trimEOL(s.buf[lineStart:])
		if len(l) == 0 {
			if lineStart == 0 {
				s.buf = s.buf[:0] // stray blank line between events
				continue
			}
			break
		}
		switch {
		case bytes.HasPrefix(l, []byte("event:")):
			v := trimSpace1(l[len("event:"):])
			nameOff, nameLen = lineStart+len(l)-len(v), len(v)
		case bytes.HasPrefix(l, []byte("data:")):
			v := trimSpace1(l[len("data:"):])
			dataLines++
			if dataLines == 1 {
				dataOff, dataLen = lineStart+len(l)-len(v), len(v)
				break
			}
			// Several data lines join with \n (the SSE rule); rare here.
			if dataLines == 2 {
				s.data = append(s.data[:0], s.buf[dataOff:dataOff+dataLen]...)
			}
			s.data = append(s.data, '\n')
			s.data = append(s.data, v...)
		}
	}
	ev.Raw = s.buf
	if nameOff >= 0 {
		ev.Name = s.buf[nameOff : nameOff+nameLen]
	}
	switch {
	case dataLines == 1:
		ev.Data = s.buf[dataOff : dataOff+dataLen]
	case dataLines > 1:
		ev.Data = s.data
	}
	return ev, nil
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

func (e sseEvent) String() string { return fmt.Sprintf("%s %s", e.Name, e.Data) }
