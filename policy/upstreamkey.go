package policy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// AnthropicKeyPrefix starts every Anthropic API key. A policy file never holds one: it names
// where the key is (upstream.api_key_env, upstream.api_key_file).
const AnthropicKeyPrefix = "sk-ant-"

// ctxproxyKeyPrefix starts ctxproxy's own keys (package keys): one can never be a tenant's
// upstream key, it would only come back to ctxproxy's own key check.
const ctxproxyKeyPrefix = "sk-ctx-"

var (
	envNameRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	pastedKeyRe = regexp.MustCompile(regexp.QuoteMeta(AnthropicKeyPrefix) + `[A-Za-z0-9_-]+`)
)

// redactKeys replaces anything shaped like an Anthropic key in a load error message: no
// message about a policy file ever repeats a key, whatever check wrote it.
func redactKeys(msg string) string {
	if !strings.Contains(msg, AnthropicKeyPrefix) {
		return msg
	}
	return pastedKeyRe.ReplaceAllString(msg, AnthropicKeyPrefix+"…")
}

// findPastedKeys reports every scalar (key or value) of the document that holds an Anthropic
// key, by line only.
func (ps *parser) findPastedKeys(n *yaml.Node) {
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, AnthropicKeyPrefix) {
		ps.add(n.Line, "this value looks like an Anthropic API key (%s…): a policy file must never hold a key; "+
			"name it with upstream.api_key_env (an environment variable) or upstream.api_key_file (a mounted secret file)", AnthropicKeyPrefix)
	}
	for _, c := range n.Content {
		ps.findPastedKeys(c)
	}
}

// upstreamKeySource reads upstream.api_key_env or upstream.api_key_file (the name, not the key).
func (ps *parser) upstreamKeySource(key string, v *yaml.Node, u *Upstream) {
	where := "upstream." + key
	s, ok := ps.str(v, where)
	if !ok {
		return
	}
	if u.APIKeyEnv != "" || u.APIKeyFile != "" {
		ps.add(v.Line, "upstream: give api_key_env or api_key_file, not both")
		return
	}
	u.keyLine = v.Line
	if key == "api_key_env" {
		if !envNameRe.MatchString(s) {
			ps.add(v.Line, "%s must be the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*), got %q", where, s)
			return
		}
		u.APIKeyEnv = s
		return
	}
	if strings.TrimSpace(s) == "" {
		ps.add(v.Line, "%s must be a file path", where)
		return
	}
	u.APIKeyFile = s
}

// readUpstreamKey reads the tenant's key from the environment or its file (a path relative to
// the policies folder, dir). Problems are load errors that never hold the key.
func (ps *parser) readUpstreamKey(p *Policy, dir string, isDefault bool) {
	u := &p.Upstream
	if u.APIKeyEnv == "" && u.APIKeyFile == "" {
		return
	}
	if isDefault {
		ps.add(u.keyLine, "default.yaml must not name an upstream key: it would be sent for every client that matches no tenant")
		return
	}
	var key, from string
	if u.APIKeyEnv != "" {
		from = "environment variable " + u.APIKeyEnv
		key = os.Getenv(u.APIKeyEnv)
		if key == "" {
			ps.add(u.keyLine, "upstream.api_key_env: %s is not set or empty", from)
			return
		}
	} else {
		path := u.APIKeyFile
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		from = "file " + u.APIKeyFile
		b, err := os.ReadFile(path)
		if err != nil {
			ps.add(u.keyLine, "upstream.api_key_file: cannot read %s: %v", u.APIKeyFile, unwrapPathError(err))
			return
		}
		key = string(b)
	}
	// Secret files and env values often end in a newline; a key itself has no white space.
	key = strings.TrimSpace(key)
	switch {
	case key == "":
		ps.add(u.keyLine, "upstream: the %s holds no key", from)
	case strings.HasPrefix(key, ctxproxyKeyPrefix):
		ps.add(u.keyLine, "upstream: the %s holds a ctxproxy key (%s…), not an Anthropic key", from, ctxproxyKeyPrefix)
	case !validHeaderValue(key):
		ps.add(u.keyLine, "upstream: the %s holds characters an HTTP header cannot carry (white space or control characters)", from)
	default:
		u.apiKey = &key
	}
}

// unwrapPathError keeps the cause of a file error without repeating the path.
func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// validHeaderValue is visible ASCII only: what an x-api-key value may be.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
