package policy

import (
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// A Lead follows a request body while it arrives and hands out what the rewrite is certain to
// make of its first bytes: the proxy sends those upstream before the rest is in, as a bare proxy
// forwards while it reads.
//
// The rewrite changes only context_management, tools and the end of the top-level object, never
// the inside of messages. So when no member before messages is context_management (whose edits
// depend on members that may come later), the body up to the end of the messages value can go
// ahead, with the memory tool already added to a tools array met on the way (that change depends
// on the array alone). The Lead finds where messages starts and skims it as its blocks come in.
// It promises nothing about a body the rewrite refuses (the proxy cuts that upload before its
// end), and RewriteLead says whether the promise held, so a caller checks that instead of
// trusting this reading.
type Lead struct {
	p        *Policy
	state    leadState
	nextHead int // the prefix length at which to read the head again
	heads    int // times the head was read
	msgStart int // the messages value's '[', once found
	msgEnd   int // the offset after it, once skimmed
	sent     int // the body bytes handed out
	pred     splice
	predText []byte // pred's text, once it is to be handed out
	predSent bool
	out      [3][]byte
	skim     valueSkim
}

type leadState uint8

const (
	leadHead     leadState = iota // looking for messages
	leadMessages                  // skimming its value
	leadDone                      // its end found: nothing after it goes ahead
	leadOff                       // nothing more goes ahead
)

// maxLeadHead bounds the members a Lead reads before messages: each call reads them again.
const maxLeadHead = 256 << 10

// LeadWorks says whether a Lead can run ahead of the body on this CPU: skimming messages as it
// arrives needs the block skim's vector code, and without it Advance hands out nothing.
var LeadWorks = vectorSkim

// NewLead starts a Lead for a Messages or count_tokens body that p rewrites (p nil: none) with
// the request headers h.
func (p *Policy) NewLead(h http.Header) *Lead {
	l := &Lead{p: p}
	if !LeadWorks || p != nil && p.MemoryOn() && toolChangesBeta(h) {
		l.state = leadOff // the memory tool may then be declared inside messages
	}
	return l
}

// Advance is called with the body read so far, each call with a longer prefix of the same
// bytes, and returns what to send next: pieces of prefix and of the rewrite's own text, in
// order, valid until the next call; none when nothing more is certain yet.
func (l *Lead) Advance(prefix []byte) [][]byte {
	switch l.state {
	case leadHead:
		if len(prefix) < l.nextHead {
			return nil
		}
		start, found, more := l.head(prefix)
		if !found {
			if !more || len(prefix) > maxLeadHead {
				l.state = leadOff
			}
			// Read again once the prefix has doubled: a body that trickles in a byte at a
			// time costs a linear number of bytes read, not a square.
			l.nextHead = 2 * len(prefix)
			return nil
		}
		l.msgStart = start
		l.skim.start(prefix, start, 1)
		l.state = leadMessages
		fallthrough
	case leadMessages:
		end, err := l.skim.walk(prefix, false)
		switch {
		case err != nil:
			l.state = leadOff // the rewrite will refuse the body
		case end > 0:
			l.msgEnd, l.state = end, leadDone
			return l.handOut(prefix, end)
		default:
			return l.handOut(prefix, l.skim.base) // every byte before it is inside messages
		}
	}
	return nil
}

// handOut returns the pieces that take what was sent up to body offset to.
func (l *Lead) handOut(prefix []byte, to int) [][]byte {
	if to <= l.sent {
		return nil
	}
	out := l.out[:0]
	from := l.sent
	if l.predText != nil && !l.predSent && l.pred.start < to {
		out = append(out, prefix[from:l.pred.start], l.predText)
		from, l.predSent = l.pred.end, true
	}
	l.sent = to
	return append(out, prefix[from:to])
}

// head finds the top-level messages value in a body's first bytes: found when it is an array and
// no member before it is context_management or a tools array the rewrite cannot change from
// what it has; more when b ends before that is known.
func (l *Lead) head(b []byte) (start int, found, more bool) {
	l.pred, l.predText = splice{}, nil // read again from the start, with the body's new bytes
	l.heads++
	tools := false
	i := skipWS(b, 0)
	if i == len(b) {
		return 0, false, true
	}
	if b[i] != '{' {
		return 0, false, false
	}
	for i = skipWS(b, i+1); ; {
		if i == len(b) {
			return 0, false, true
		}
		if b[i] != '"' {
			return 0, false, false
		}
		keyStart := i
		end, err := skimString(b, i+1)
		if err != nil {
			return 0, false, end == len(b)
		}
		key := unsafe.String(unsafe.SliceData(b[i+1:]), end-1-(i+1))
		if strings.IndexByte(key, '\\') >= 0 {
			return 0, false, false // an escaped key may spell one the rewrite changes
		}
		i = skipWS(b, end)
		if i == len(b) {
			return 0, false, true
		}
		if b[i] != ':' {
			return 0, false, false
		}
		if i = skipWS(b, i+1); i == len(b) {
			return 0, false, true
		}
		switch key {
		case "messages":
			return i, b[i] == '[', false
		case "context_management":
			return 0, false, false
		}
		valStart := i
		if i, err = skipValue(b, i); err != nil {
			return 0, false, err.off == len(b)
		}
		if key == "tools" {
			if tools || !l.predictTools(b, keyStart, end, valStart, i) {
				return 0, false, false // a second tools is refused
			}
			tools = true
		}
		if i = skipWS(b, i); i == len(b) {
			return 0, false, true
		}
		if b[i] != ',' {
			return 0, false, false // the object's end (no messages) or not JSON
		}
		i = skipWS(b, i+1)
	}
}

// predictTools works out the rewrite's change to a tools array met before messages: the memory
// tool added, as the rewrite adds it (memoryToolOp), or nothing. False when it cannot be known
// here or the rewrite will refuse it.
func (l *Lead) predictTools(b []byte, keyStart, keyEnd, valStart, valEnd int) bool {
	p := l.p
	if p == nil || !p.MemoryOn() {
		return true
	}
	if b[valStart] != '[' {
		return false // null is replaced, anything else refused: not worth predicting
	}
	s := unsafe.String(unsafe.SliceData(b), len(b))
	val := gjson.Parse(s[valStart:valEnd])
	val.Index = valStart
	m := member{found: true, key: gjson.Result{Type: gjson.String, Raw: s[keyStart:keyEnd], Str: "tools", Index: keyStart}, val: val}
	op, declared, err := p.memoryToolOp(s, m)
	if err != nil {
		return false
	}
	if !declared {
		l.pred = op
		l.predText = []byte(op.pre + op.data + op.post)
	}
	return true
}

// finish completes the skim of messages on the whole body, so the body's scan need not repeat
// it, and returns the span skimmed (zero when none).
func (l *Lead) finish(body []byte) span {
	if l.state == leadMessages {
		end, err := l.skim.walk(body, true)
		l.state = leadOff
		if err != nil {
			return span{}
		}
		l.msgEnd, l.state = end, leadDone
	}
	if l.state != leadDone {
		return span{}
	}
	return span{l.msgStart, l.msgEnd}
}

// skipValue returns the offset after the value at b[i], checked only for its extent; an error at
// len(b) when the value goes on past b.
func skipValue(b []byte, i int) (int, *scanError) {
	switch b[i] {
	case '"':
		return skimString(b, i+1)
	case '[', '{':
		return skimValueBlocks(b, i, 1)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
		j++
	}
	if j == len(b) {
		return j, &scanError{j, "unexpected end of JSON input"}
	}
	return j, nil
}

// span is a byte range of a body; the zero span is none.
type span struct{ start, end int }

// RewriteLead is RewriteParts for a body a Lead followed as it arrived; the messages value the
// Lead skimmed is not skimmed again. parts is the whole rewritten body. rest is what follows the
// pieces the Lead handed out, when they are what the rewrite makes; nil when they are not (the
// caller must then send parts instead, from the start).
func (p *Policy) RewriteLead(body []byte, h http.Header, l *Lead) (parts, rest [][]byte, info RewriteInfo, err error) {
	ops, info, err := p.rewrite(body, h, false, l.finish(body))
	if err != nil {
		return nil, nil, info, err
	}
	parts = [][]byte{body}
	if len(ops) > 0 {
		parts = spliceParts(body, ops)
	}
	// The Lead sent body[:l.sent] with its predicted change applied, if it sent that: it holds
	// when those are exactly the changes before l.sent.
	// parts then begins with exactly what the Lead handed out.
	predicted := 0
	for _, o := range ops {
		switch {
		case o.start >= l.sent:
		case l.predSent && o == l.pred:
			predicted++
		default:
			return parts, nil, info, nil
		}
	}
	handed := l.sent
	if l.predSent {
		if predicted != 1 {
			return parts, nil, info, nil
		}
		handed += len(l.predText) - (l.pred.end - l.pred.start)
	}
	return parts, dropPrefix(parts, handed), info, nil
}

// dropPrefix is parts without their first n bytes.
func dropPrefix(parts [][]byte, n int) [][]byte {
	for len(parts) > 0 && n >= len(parts[0]) {
		n -= len(parts[0])
		parts = parts[1:]
	}
	if len(parts) > 0 && n > 0 {
		parts = append([][]byte{parts[0][n:]}, parts[1:]...)
	}
	return parts
}
