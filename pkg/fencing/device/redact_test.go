package device

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"fenced.io/fenced/internal/testbed/redfishsim"
	"fenced.io/fenced/pkg/vocab"
)

// redactTestUser is the BMC user of the redaction tests.
const redactTestUser = "fenced"

// redactTestPasswords each contain characters that some encoding escapes.
var redactTestPasswords = []string{
	`pa"ss"word`,
	`back\slash\`,
	`<angle>brackets`,
	`amp&ersand&&`,
	`per%cent%25`,
	`plus+sign++`,
	`sl/ash//`,
	`equals=sign==`,
	`with space  `,
	`ünïcödé-密码-😀`,
	`all" \ < > & % + / = ü 😀 '`,
	"tab\tnew\nline",
	`x`,
}

// encoder is one way a BMC may echo a password into an error body.
type encoder struct {
	name   string
	encode func(password string) string
}

// redactTestEncoders are the encodings every test password must be
// redacted in.
var redactTestEncoders = []encoder{
	{"literal", func(p string) string { return p }},
	{"Go encoding/json (HTML-escaped)", jsonString},
	{"JSON without HTML escaping", func(p string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(p)
		return strings.TrimSpace(b.String())
	}},
	{"JSON ASCII-only, lower-case hex (Python json.dumps)", func(p string) string { return asciiJSON(p, "\\u%04x", false) }},
	{"JSON ASCII-only, upper-case hex", func(p string) string { return asciiJSON(p, "\\u%04X", false) }},
	{"JSON with escaped slashes (PHP json_encode)", func(p string) string { return asciiJSON(p, "\\u%04x", true) }},
	{"JSON every character escaped", func(p string) string {
		var b strings.Builder
		for _, u := range utf16.Encode([]rune(p)) {
			fmt.Fprintf(&b, "\\u%04x", u)
		}
		return b.String()
	}},
	{"JSON body inside a JSON string", func(p string) string { return jsonString(jsonString(p)) }},
	{"JSON request body inside a JSON string, HTML-escaped", func(p string) string {
		body, _ := json.Marshal(map[string]string{"UserName": redactTestUser, "Password": p})
		return jsonString(string(body))
	}},
	{"url.QueryEscape (form, + for space)", url.QueryEscape},
	{"url.PathEscape", url.PathEscape},
	{"url.Values.Encode", func(p string) string { return url.Values{"password": {p}}.Encode() }},
	{"every byte percent-encoded, upper case", func(p string) string { return percentAll(p, "%%%02X") }},
	{"every byte percent-encoded, lower case", func(p string) string { return percentAll(p, "%%%02x") }},
	{"percent-encoded twice", func(p string) string { return url.QueryEscape(url.QueryEscape(p)) }},
	{"html.EscapeString", html.EscapeString},
	{"xml.EscapeText", func(p string) string {
		var b bytes.Buffer
		_ = xml.EscapeText(&b, []byte(p))
		return b.String()
	}},
	{"HTML hex references", func(p string) string { return charRefs(p, "&#x%X;") }},
	{"HTML decimal references with zeros", func(p string) string { return charRefs(p, "&#%04d;") }},
	{"HTML named references", func(p string) string {
		return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace(p)
	}},
	{"HTML escaped twice", func(p string) string { return html.EscapeString(html.EscapeString(p)) }},
	{"strconv.Quote", strconv.Quote},
	{"strconv.QuoteToASCII", strconv.QuoteToASCII},
	{"Go %q of bytes, hex escapes", func(p string) string { return fmt.Sprintf("%+q", []byte(p)) }},
	{"C octal escapes", func(p string) string {
		var b strings.Builder
		for i := 0; i < len(p); i++ {
			fmt.Fprintf(&b, "\\%03o", p[i])
		}
		return b.String()
	}},
	{"Basic token, standard base64", func(p string) string { return basic(base64.StdEncoding, p) }},
	{"Basic token, standard base64 unpadded", func(p string) string { return basic(base64.RawStdEncoding, p) }},
	{"Basic token, URL base64", func(p string) string { return basic(base64.URLEncoding, p) }},
	{"Basic token, URL base64 unpadded", func(p string) string { return basic(base64.RawURLEncoding, p) }},
	{"Authorization header line", func(p string) string { return "Authorization: Basic " + basic(base64.StdEncoding, p) }},
	{"Basic token percent-encoded", func(p string) string { return url.QueryEscape(basic(base64.StdEncoding, p)) }},
	{"Basic token with escaped slashes", func(p string) string {
		return strings.ReplaceAll(basic(base64.StdEncoding, p), "/", `\/`)
	}},
	{"base64 of the password alone", func(p string) string { return base64.StdEncoding.EncodeToString([]byte(p)) }},
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// asciiJSON encodes s as a JSON string with every non-ASCII character as a
// \u escape (surrogate pairs beyond the BMP) in the given format.
func asciiJSON(s, format string, slash bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r == '/' && slash:
			b.WriteString(`\/`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r >= utf8.RuneSelf:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, format, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func percentAll(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, format, s[i])
	}
	return b.String()
}

func charRefs(s, format string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, format, r)
	}
	return b.String()
}

func basic(enc *base64.Encoding, password string) string {
	return enc.EncodeToString([]byte(redactTestUser + ":" + password))
}

// checkRedacted fails when secret survives in got outside the redaction
// markers (the marker itself may contain the characters of a one-letter
// secret).
func checkRedacted(t *testing.T, got, secret string) {
	t.Helper()
	for _, part := range strings.Split(got, redactionMarker) {
		if strings.Contains(part, secret) {
			t.Fatalf("secret %q survives redaction in %q", secret, got)
		}
	}
}

func TestRedactErrorEncodings(t *testing.T) {
	for _, pw := range redactTestPasswords {
		for _, enc := range redactTestEncoders {
			t.Run(fmt.Sprintf("%q/%s", pw, enc.name), func(t *testing.T) {
				encoded := enc.encode(pw)
				in := errors.New("bmc said: " + encoded + " (end)")
				got := redactError(in, redactTestUser, pw)
				checkRedacted(t, got.Error(), encoded)
				if !strings.Contains(got.Error(), redactionMarker) {
					t.Errorf("no %s in %q", redactionMarker, got)
				}
				if len(pw) > 1 && (!strings.HasPrefix(got.Error(), "bmc said: ") || !strings.HasSuffix(got.Error(), " (end)")) {
					t.Errorf("text around the secret was lost: %q", got)
				}
				if errors.Unwrap(got) != nil {
					t.Errorf("redacted error wraps %v: the original is reachable", errors.Unwrap(got))
				}
			})
		}
	}
}

func TestRedactErrorKeepsCleanErrors(t *testing.T) {
	sentinel := errors.New("connection refused")
	tests := []struct {
		name     string
		err      error
		password string
		secrets  []string
		want     string
		same     bool // the very same error comes back (chain intact)
	}{
		{name: "nil", err: nil, password: "pw"},
		{name: "no secret in it", err: fmt.Errorf("dial: %w", sentinel), password: "pa&ss", want: "dial: connection refused", same: true},
		{name: "no password yet", err: fmt.Errorf("reading password: %w", sentinel), want: "reading password: connection refused", same: true},
		{name: "user name alone is not secret", err: errors.New(`user "fenced" refused`), password: "hunter2", want: `user "fenced" refused`, same: true},
		{name: "trailing newline trimmed", err: errors.New("500: {}\n"), password: "hunter2", want: "500: {}"},
		{name: "extra secret", err: errors.New("token tok-123 expired"), secrets: []string{"tok-123"}, want: "token <redacted> expired"},
		{name: "user:password", err: errors.New("login fenced:hunter2 refused"), password: "hunter2", want: "login fenced:<redacted> refused"},
		{name: "several occurrences", err: errors.New("a hunter2 b hunter2"), password: "hunter2", want: "a <redacted> b <redacted>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redactError(tt.err, redactTestUser, tt.password, tt.secrets...)
			if tt.err == nil {
				if got != nil {
					t.Fatalf("redactError(nil) = %v", got)
				}
				return
			}
			if got.Error() != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if tt.same && got != tt.err {
				t.Errorf("a clean error was replaced (its chain is lost): %T %v", got, got)
			}
		})
	}
}

func TestTruncateError(t *testing.T) {
	long := strings.Repeat("é", maxErrorText) // two bytes each
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "short", in: "short", want: "short"},
		{name: "exactly the limit", in: strings.Repeat("a", maxErrorText), want: strings.Repeat("a", maxErrorText)},
		{name: "ASCII", in: strings.Repeat("a", maxErrorText+10), want: strings.Repeat("a", maxErrorText) + "...(truncated)"},
		{name: "never splits a rune", in: "x" + long, want: "x" + long[:maxErrorText-2] + "...(truncated)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := truncateError(errors.New(tt.in), maxErrorText).Error()
			if got != tt.want {
				t.Errorf("got %q (%d bytes), want %d bytes", got, len(got), len(tt.want))
			}
			if !utf8.ValidString(got) {
				t.Errorf("result is not valid UTF-8")
			}
		})
	}
}

// TestCredentialPatternLongSecret checks that the pattern of a long
// password (Redfish allows long ones) still compiles and runs fast.
func TestCredentialPatternLongSecret(t *testing.T) {
	pw := strings.Repeat(`aZ9"\<>&%+/= ü😀`, 16) // 256 characters
	start := time.Now()
	got := redactError(errors.New("echo "+jsonString(pw)+" "+basic(base64.StdEncoding, pw)), redactTestUser, pw)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("redacting a 256-character password took %s", d)
	}
	if got == errWithheld {
		t.Fatalf("pattern did not compile for a 256-character password")
	}
	if want := `echo "<redacted>" <redacted>`; got.Error() != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// FuzzRedactError checks, for any valid UTF-8 password, that none of the
// encodings of redactTestEncoders survives the credential pattern (the core
// of redactError, compiled once per input to keep the fuzzer fast).
func FuzzRedactError(f *testing.F) {
	for _, pw := range redactTestPasswords {
		f.Add(pw)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		if pw == "" || !utf8.ValidString(pw) || len(pw) > 32 {
			return
		}
		re, err := credentialPattern(redactTestUser, pw)
		if err != nil {
			t.Fatalf("no pattern for %q: %v", pw, err)
		}
		for _, enc := range redactTestEncoders {
			encoded := enc.encode(pw)
			if strings.ContainsRune(encoded, utf8.RuneError) && !strings.ContainsRune(pw, utf8.RuneError) {
				// A lossy encoder (xml.EscapeText replaces characters XML
				// cannot hold): what it wrote is not the password.
				continue
			}
			got := re.ReplaceAllLiteralString("bmc said: "+encoded+" (end)", redactionMarker)
			for _, part := range strings.Split(got, redactionMarker) {
				if strings.Contains(part, encoded) {
					t.Fatalf("%s of %q survives redaction: %q", enc.name, pw, got)
				}
			}
		}
	})
}

// TestRedfishSimEchoNeverLeaks runs the driver against the simulator
// answering every error with the request it refused (headers and body
// quoted in its JSON message), for passwords that need escaping in JSON,
// form and URL encodings.
func TestRedfishSimEchoNeverLeaks(t *testing.T) {
	tests := []struct {
		name      string
		auth      string
		fault     *redfishsim.Fault
		wrongPass bool
		wantKind  vocab.ErrorKind
		wantText  string
	}{
		{name: "session login refused", auth: RedfishAuthSession, wrongPass: true, wantKind: vocab.KindAuth,
			wantText: "opening session: HTTP 401 Unauthorized (Base.1.8.GeneralError), response body not shown"},
		{name: "basic request refused", auth: RedfishAuthBasic, wrongPass: true, wantKind: vocab.KindAuth,
			wantText: "HTTP 401 Unauthorized (Base.1.8.GeneralError), response body not shown"},
		{name: "session login fails with 400", auth: RedfishAuthSession, wantKind: vocab.KindBMC,
			fault:    &redfishsim.Fault{Path: redfishsim.SessionsPath, Status: http.StatusBadRequest},
			wantText: "opening session: HTTP 400 Bad Request (Base.1.8.GeneralError), response body not shown"},
		{name: "basic: 403 on the system", auth: RedfishAuthBasic, wantKind: vocab.KindAuth,
			fault:    &redfishsim.Fault{Path: redfishsim.SystemPath, Status: http.StatusForbidden},
			wantText: "HTTP 403 Forbidden (Base.1.8.GeneralError), response body not shown"},
		// In Basic-auth mode every request carries the password, so every
		// error answer loses its body.
		{name: "basic: 500 on the system echoes the Authorization header", auth: RedfishAuthBasic, wantKind: vocab.KindBMC,
			fault:    &redfishsim.Fault{Path: redfishsim.SystemPath, Status: http.StatusInternalServerError},
			wantText: "HTTP 500 Internal Server Error (Base.1.8.GeneralError), response body not shown"},
		// A 500 after login echoes the session token, a credential until
		// the logout.
		{name: "session: 500 on the system echoes the token", auth: RedfishAuthSession, wantKind: vocab.KindBMC,
			fault: &redfishsim.Fault{Path: redfishsim.SystemPath, Status: http.StatusInternalServerError}, wantText: "X-Auth-Token: " + redactionMarker},
	}
	for _, pw := range redactTestPasswords {
		if len(pw) < 2 {
			continue
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%q/%s", pw, tt.name), func(t *testing.T) {
				sim := rfNewSim(t, redfishsim.Options{Password: pw, EchoRequest: true})
				sent := pw
				if tt.wrongPass {
					sent = pw + "<&wrong>"
				}
				d := rfNewDriver(t, sim.URL, func(o *RedfishOptions) {
					o.Auth = tt.auth
					o.Credentials.Password = rfStaticPassword(sent)
				})
				if tt.fault != nil {
					// Fail only the request under test, after login.
					sim.SetFault(*tt.fault)
				}
				_, err := d.PowerState(rfCtx(t, 10*time.Second))
				rfCheckErr(t, err, tt.wantKind, sim.URL)
				msg := err.Error()
				t.Logf("error: %s", msg)
				if !strings.Contains(msg, tt.wantText) {
					t.Errorf("error %q does not contain %q", msg, tt.wantText)
				}
				for _, enc := range redactTestEncoders {
					if e := enc.encode(sent); len(e) > 2 {
						checkRedacted(t, msg, e)
					}
				}
				if strings.Contains(msg, "token-") {
					t.Errorf("session token leaked: %q", msg)
				}
			})
		}
	}
}

// TestIPMIFailRedacts checks that every IPMI driver error passes through
// the redaction (go-ipmi itself does not quote the password today).
func TestIPMIFailRedacts(t *testing.T) {
	const pw = `ip&mi"pw<1>`
	b, err := NewIPMI(IPMIOptions{
		DriverOptions:  DriverOptions{Node: "node-a"},
		Host:           "127.0.0.1",
		Port:           623,
		Credentials:    Credentials{Username: redactTestUser, Password: rfStaticPassword(pw)},
		CipherSuite:    3,
		PrivilegeLevel: "administrator",
	})
	if err != nil {
		t.Fatalf("NewIPMI: %v", err)
	}
	for _, enc := range redactTestEncoders {
		t.Run(enc.name, func(t *testing.T) {
			cause := fmt.Errorf("opening session: %w", errors.New("BMC answered "+enc.encode(pw)))
			got := b.fail(vocab.OpPowerStatus, vocab.KindAuth, cause, pw)
			var be *Error
			if !errors.As(got, &be) || be.Kind != vocab.KindAuth || be.Node != "node-a" {
				t.Fatalf("fail returned %#v", got)
			}
			checkRedacted(t, got.Error(), enc.encode(pw))
			if !strings.Contains(got.Error(), "opening session: BMC answered ") {
				t.Errorf("context lost: %v", got)
			}
		})
	}
}
