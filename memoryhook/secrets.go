package memoryhook

import (
	"bytes"
	"regexp"
)

// Secret is one secret found in a text: its kind, as a refusal names it,
// and the matched bytes (never shown to anyone).
type Secret struct {
	Kind string
	Text []byte
}

// secretFormats are the well-known formats memory.gate refuses: a short
// table (no maintained Go library fits without pulling in a scanner's
// whole rule set), most specific first, each with a test.
var secretFormats = []struct {
	kind string
	re   *regexp.Regexp
}{
	{"an Anthropic API key", regexp.MustCompile(`sk-ant-[a-z]+[0-9]*-[A-Za-z0-9_-]{20,}`)},
	{"a ctxproxy key", regexp.MustCompile(`sk-ctx-[A-Za-z0-9]{20,}`)},
	{"an OpenAI API key", regexp.MustCompile(`sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}`)},
	{"an AWS access key", regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`)},
	{"a GitHub token", regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})`)},
	{"a Slack token", regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`)},
	{"a private key", regexp.MustCompile(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----`)},
}

// FindSecret returns the first secret in text, in the table's order.
func FindSecret(text []byte) (Secret, bool) {
	if len(text) == 0 {
		return Secret{}, false
	}
	for _, f := range secretFormats {
		if m := f.re.Find(text); m != nil {
			return Secret{Kind: f.kind, Text: m}, true
		}
	}
	return Secret{}, false
}

// FindSecrets returns every secret in text.
func FindSecrets(text []byte) []Secret {
	var out []Secret
	for _, f := range secretFormats {
		for _, m := range f.re.FindAll(text, -1) {
			out = append(out, Secret{Kind: f.kind, Text: m})
		}
	}
	return out
}

func containsBytes(b, sub []byte) bool { return bytes.Contains(b, sub) }
