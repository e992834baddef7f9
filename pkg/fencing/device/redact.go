package device

import (
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// redactionMarker replaces every occurrence of a credential in error text.
const redactionMarker = "<redacted>"

// errWithheld replaces an error whose text could not be redacted (the
// pattern for an extremely long secret did not compile): dropping the text
// is the only safe answer then.
var errWithheld = errors.New("error text withheld: the BMC credentials could not be redacted from it")

// redactError returns err unchanged when its text contains no credential
// and no trailing white space, and otherwise a plain error whose text has
// every encoding of the credentials redacted (see credentialPattern) and
// trailing white space trimmed.
//
// The original is deliberately not wrapped, so no caller can reach the
// unredacted text through errors.Unwrap; callers classify err before
// redacting it. secrets are further values to redact (a Redfish session
// token); empty ones are ignored.
func redactError(err error, username, password string, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	// BMC error bodies usually end in a newline, which breaks log lines.
	trimmed := strings.TrimRight(msg, " \t\r\n")
	changed := trimmed != msg
	msg = trimmed
	re, cerr := credentialPattern(username, password, secrets...)
	if cerr != nil {
		return errWithheld
	}
	if re != nil {
		if redacted := re.ReplaceAllLiteralString(msg, redactionMarker); redacted != msg {
			msg = redacted
			changed = true
		}
	}
	if !changed {
		return err
	}
	return errors.New(msg)
}

// truncateError returns err unchanged when its text fits in limit bytes,
// and otherwise a plain error with the text cut there. Call it after
// redactError: cutting first could leave part of a secret that no longer
// matches.
func truncateError(err error, limit int) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if len(msg) <= limit {
		return err
	}
	cut := limit
	// Never split a UTF-8 sequence: the text goes into JSON logs and
	// Kubernetes Events.
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return errors.New(msg[:cut] + "...(truncated)")
}

// credentialPattern returns one regular expression matching every form in
// which a BMC may echo the credentials back into an error:
//
//   - the password itself, and the HTTP basic-auth token (base64 of
//     "username:password") and base64 of the password alone, each in the
//     standard and URL alphabets, with and without padding;
//   - each of these with any of its characters written in any of the
//     escapes in runeForms: JSON (\" \\ \/ \n \u003c, surrogate pairs,
//     upper- or lower-case hex), Go, C and Python string escapes (\x3c,
//     \074, \U0001f600, \u{1f600}), percent-encoding (either case, and '+'
//     for a space as in form encoding), and HTML/XML character references
//     (&lt; &quot; &#39; &#x3C;). Characters may mix escapes, so a BMC that
//     escapes only some of them is covered too.
//
// Escapes may be nested, as when a BMC puts the JSON request body it
// received into the JSON string of its error message (\\\" or \\u003c),
// percent-encodes twice (%253C) or HTML-escapes an entity (&amp;lt;).
//
// It returns nil when there is nothing to redact.
func credentialPattern(username, password string, secrets ...string) (*regexp.Regexp, error) {
	values := slices.Clone(secrets)
	if password != "" {
		values = append(values, password)
		for _, raw := range []string{username + ":" + password, password} {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
				values = append(values, enc.EncodeToString([]byte(raw)))
			}
		}
	}
	values = slices.DeleteFunc(values, func(s string) bool { return s == "" })
	if len(values) == 0 {
		return nil, nil
	}
	// Longest first: where two values match at the same place, the longer
	// one is redacted whole (alternation prefers earlier branches).
	slices.SortStableFunc(values, func(a, b string) int { return len(b) - len(a) })
	values = slices.Compact(values)

	var b strings.Builder
	b.WriteString("(?:")
	for i, v := range values {
		if i > 0 {
			b.WriteByte('|')
		}
		writeValuePattern(&b, v)
	}
	b.WriteByte(')')
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("building the credential pattern: %w", err)
	}
	return re, nil
}

// writeValuePattern writes a pattern matching v with each of its
// characters in any of its runeForms.
func writeValuePattern(b *strings.Builder, v string) {
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		raw := v[i : i+size]
		i += size
		b.WriteString("(?:")
		b.WriteString(strings.Join(runeForms(r, raw), "|"))
		b.WriteByte(')')
	}
}

// Prefixes that let escapes nest: one or more backslashes (a JSON body
// inside a JSON string), "%" followed by any number of "25" (percent-encoded
// percent signs), "&" followed by any number of "amp;".
const (
	backslashes = `\\+`
	percent     = `%(?:25)*`
	ampersand   = `&(?:amp;)*`
)

// htmlNames are the named character references BMCs and the common
// escapers use.
var htmlNames = map[rune]string{'<': "lt", '>': "gt", '&': "amp", '"': "quot", '\'': "apos", '\u00a0': "nbsp"}

// cEscapes are the one-letter backslash escapes of JSON, Go, C and Python.
var cEscapes = map[rune]string{'\a': "a", '\b': "b", '\f': "f", '\n': "n", '\r': "r", '\t': "t", '\v': "v", 0: "0"}

// runeForms returns the patterns of every spelling of one character of a
// secret, longest alternatives first. raw is its UTF-8 encoding (a single
// byte when the secret is not valid UTF-8 there).
func runeForms(r rune, raw string) []string {
	var forms []string
	valid := r != utf8.RuneError || raw == string(utf8.RuneError)
	if valid {
		// \u00e4 (JSON, Go, Python), with a UTF-16 surrogate pair beyond
		// the BMP as JSON requires; \U0001f600 (Go, Python); \u{1f600}
		// (JavaScript, Rust).
		if r > 0xffff {
			hi, lo := utf16Surrogates(r)
			forms = append(forms, backslashes+"u"+hexPattern(uint64(hi), 4)+backslashes+"u"+hexPattern(uint64(lo), 4))
		} else {
			forms = append(forms, backslashes+"u"+hexPattern(uint64(r), 4))
		}
		forms = append(forms,
			backslashes+"U"+hexPattern(uint64(r), 8),
			backslashes+`u\{0*`+hexPattern(uint64(r), 0)+`\}`,
			// &#228; and &#xE4; (HTML, XML), leading zeros allowed.
			ampersand+"#0*"+strconv.Itoa(int(r))+";",
			ampersand+"#[xX]0*"+hexPattern(uint64(r), 0)+";",
		)
		if name, ok := htmlNames[r]; ok {
			forms = append(forms, ampersand+"(?i:"+name+");")
		}
		if e, ok := cEscapes[r]; ok {
			forms = append(forms, backslashes+e)
		}
		if r < utf8.RuneSelf && strings.ContainsRune("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ ", r) {
			// \" \\ \/ \' and the escapes of shells and other quoters.
			forms = append(forms, backslashes+regexp.QuoteMeta(string(r)))
		}
	}
	// Byte-wise: %C3%A4 (percent-encoding), \xc3\xa4 (Go, C, Python
	// bytes), \303\244 (C, octal).
	var pct, hexEsc, octEsc strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		pct.WriteString(percent + hexPattern(uint64(c), 2))
		hexEsc.WriteString(backslashes + "x" + hexPattern(uint64(c), 2))
		fmt.Fprintf(&octEsc, "%s%03o", backslashes, c)
	}
	forms = append(forms, pct.String(), hexEsc.String(), octEsc.String())
	if r == ' ' {
		// Form encoding (application/x-www-form-urlencoded, Go's
		// url.QueryEscape) writes a space as '+', which encoded once more
		// becomes %2B.
		forms = append(forms, percent+"2[bB]", `\+`)
	}
	return append(forms, regexp.QuoteMeta(raw))
}

// hexPattern matches v in hexadecimal with either letter case, padded with
// zeros to width digits (no padding when width is 0).
func hexPattern(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	if len(digits) < width {
		digits = strings.Repeat("0", width-len(digits)) + digits
	}
	var b strings.Builder
	for _, d := range digits {
		if d >= 'a' && d <= 'f' {
			b.WriteString("[" + string(d) + string(d-'a'+'A') + "]")
		} else {
			b.WriteRune(d)
		}
	}
	return b.String()
}

// utf16Surrogates splits a rune beyond the Basic Multilingual Plane into
// its UTF-16 surrogate pair.
func utf16Surrogates(r rune) (hi, lo rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}
