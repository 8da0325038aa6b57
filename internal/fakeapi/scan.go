package fakeapi

import (
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// A minimal reader for JSON that gjson.Valid has already accepted. gjson
// unescapes every string value it returns and re-walks a value for each Get;
// on a 1 MB tool transcript that was most of the fake's time. These helpers
// find members and elements in one walk, skip strings with IndexByte and never
// unescape a value: callers take raw values and parse the small ones with
// gjson.Parse, so they read exactly what gjson.Get would have returned. On
// malformed input they stop early (never panic, always progress).

// view is b as a string without a copy; b must not change while the view is used
// (request bodies are never written after they are read).
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string whose opening quote is s[i].
func skipString(s string, i int) int {
	for i++; i < len(s); i++ {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			break
		}
		i += j
		// The quote ends the string unless an odd number of backslashes precede it.
		k := i
		for s[k-1] == '\\' { // stops at the opening quote at the latest
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
	}
	return len(s)
}

// skipValue returns the index after the value that starts at s[i].
func skipValue(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = skipString(s, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(s)
	default: // number, true, false, null
		for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
			i++
		}
		return i
	}
}

// eachMember calls fn with every member of the object that starts at s[i]
// (its key unescaped, as gjson matches keys, and the offset of its value);
// fn returns the end of that value, so it may descend into it instead of
// skipping it. eachMember returns the index after the object.
func eachMember(s string, i int, fn func(key string, v int) int) int {
	i = skipSpace(s, i+1)
	for i < len(s) && s[i] == '"' {
		ke := skipString(s, i)
		key := s[i+1 : max(ke-1, i+1)]
		if strings.IndexByte(key, '\\') >= 0 {
			key = gjson.Parse(s[i:ke]).Str
		}
		i = skipSpace(s, ke)
		if i >= len(s) || s[i] != ':' {
			return len(s)
		}
		i = skipSpace(s, fn(key, skipSpace(s, i+1)))
		if i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
		}
	}
	if i < len(s) && s[i] == '}' {
		return i + 1
	}
	return len(s)
}

// eachElement calls fn with the offset of every element of the array that
// starts at s[i]; fn returns the element's end. It returns the index after
// the array.
func eachElement(s string, i int, fn func(v int) int) int {
	i = skipSpace(s, i+1)
	for i < len(s) && s[i] != ']' {
		end := fn(i)
		if end <= i {
			return len(s)
		}
		i = skipSpace(s, end)
		if i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
		}
	}
	if i < len(s) {
		return i + 1
	}
	return len(s)
}

// str is what gjson's Result.Str holds for the raw value v: the unescaped
// string, or "" when v is not a string.
func str(v string) string {
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	if strings.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1]
	}
	return gjson.Parse(v).Str
}

// isString, isObject and isArray are gjson's type tests on a raw value ("" is
// a missing value).
func isString(v string) bool { return v != "" && v[0] == '"' }
func isObject(v string) bool { return v != "" && v[0] == '{' }
func isArray(v string) bool  { return v != "" && v[0] == '[' }

// blockFacts is what the conversation checks and the edits read of one
// content block: the raw value of the first member of each name they look
// at (where gjson.Get would find it; "" when missing).
type blockFacts struct {
	object bool
	size   int    // bytes of the block's JSON
	typ    string // the Str of type
	raw    string // the block's JSON as sent

	// Raw values of these members.
	id, name, input, signature, thinking, data, toolUseID, content, text, cacheControl string
}

// turnFacts is one message of the conversation as the checks and the edits
// read it.
type turnFacts struct {
	object  bool
	role    string // the Str of role
	content string // raw; "" when missing
	blocks  []blockFacts
}

// scanTurn reads message m in one walk; its blocks are appended to buf
// (shared by the whole conversation, so a transcript costs a few
// allocations, not a few per message).
func scanTurn(m string, buf []blockFacts) (turnFacts, []blockFacts) {
	var t turnFacts
	i := skipSpace(m, 0)
	if i >= len(m) || m[i] != '{' {
		return t, buf
	}
	t.object = true
	haveRole, haveContent := false, false
	eachMember(m, i, func(key string, v int) int {
		switch {
		case key == "role" && !haveRole:
			haveRole = true
			end := skipValue(m, v)
			t.role = str(m[v:end])
			return end
		case key == "content" && !haveContent:
			haveContent = true
			end := 0
			if v < len(m) && m[v] == '[' {
				first := len(buf)
				end = eachElement(m, v, func(e int) int {
					var b blockFacts
					var blockEnd int
					b, blockEnd = scanBlock(m, e)
					buf = append(buf, b)
					return blockEnd
				})
				t.blocks = buf[first:len(buf):len(buf)]
			} else {
				end = skipValue(m, v)
			}
			t.content = m[v:end]
			return end
		}
		return skipValue(m, v)
	})
	return t, buf
}

// scanBlock reads the content block at s[i] and returns the index after it.
func scanBlock(s string, i int) (blockFacts, int) {
	var b blockFacts
	if s[i] != '{' {
		end := skipValue(s, i)
		b.size = end - i
		b.raw = s[i:end]
		return b, end
	}
	b.object = true
	typ := ""
	end := eachMember(s, i, func(key string, v int) int {
		end := skipValue(s, v)
		var field *string
		switch key {
		case "type":
			field = &typ
		case "id":
			field = &b.id
		case "name":
			field = &b.name
		case "input":
			field = &b.input
		case "signature":
			field = &b.signature
		case "thinking":
			field = &b.thinking
		case "data":
			field = &b.data
		case "tool_use_id":
			field = &b.toolUseID
		case "content":
			field = &b.content
		case "text":
			field = &b.text
		case "cache_control":
			field = &b.cacheControl
		default:
			return end
		}
		if *field == "" { // the first one counts, as for gjson.Get
			*field = s[v:end]
		}
		return end
	})
	b.typ = str(typ)
	b.size = end - i
	b.raw = s[i:end]
	return b, end
}
