package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRequests sends arbitrary paths, queries and bodies (forms and JSON)
// to the console as an operator: nothing panics and nothing is an
// internal error; bad input is a 4xx.
func FuzzRequests(f *testing.F) {
	f.Add("POST", "/ui/api/approvals/apr_1/decide", "application/json", `{"approve":true,"reason":"ok"}`)
	f.Add("POST", "/ui/api/approvals/apr_1/decide", "application/json", `{"approve":true,"approve":false}`)
	f.Add("POST", "/ui/approvals/apr_1/decide", "application/x-www-form-urlencoded", "decision=deny&reason=%ff%fe")
	f.Add("POST", "/ui/api/tools/accept", "application/json", `{"tool":"up.echo","hash":"sha256:bbbb"}`)
	f.Add("GET", "/ui/journal?offset=99999999999999999999&caller=%00", "", "")
	f.Add("GET", "/ui/api/journal?status=tool_error&offset=-5", "", "")
	f.Add("POST", "/ui/login", "application/x-www-form-urlencoded", "token=x&next=//evil")
	f.Add("GET", "/ui/login?next=/ui/%0d%0aSet-Cookie:x", "", "")
	f.Add("POST", "/ui/api/approvals/apr_1/decide", "application/json", strings.Repeat("[", 5000))
	fb := &fakeBackend{}
	fb.addPending("apr_1", "write")
	c := New(fb, NewTokenAuth(map[string]string{opToken: "ops"}, nil), nil)
	defer c.Close()
	f.Fuzz(func(t *testing.T, method, target, contentType, body string) {
		if method != "GET" && method != "POST" {
			method = "POST"
		}
		if !strings.HasPrefix(target, "/ui/") || strings.Contains(target, "/events") {
			return // the live stream never ends; other paths are not the console's
		}
		req, err := http.NewRequest(method, "http://127.0.0.1"+target, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Host = "127.0.0.1"
		req.Header.Set("Authorization", "Bearer "+opToken)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %s (%s) %q: %d %s", method, target, contentType, body, w.Code, w.Body)
		}
	})
}
