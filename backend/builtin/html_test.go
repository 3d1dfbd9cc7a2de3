package builtin

import (
	"net/url"
	"testing"
)

func TestHTMLText(t *testing.T) {
	base, _ := url.Parse("https://example.com/docs/page.html")
	for _, c := range []struct{ name, in, want string }{
		{"scripts and styles dropped",
			`<html><head><title>Title</title><style>body{color:red}</style><script>alert("x")</script></head>
			<body><noscript>enable js</noscript><p>Visible</p><script>var y = 2;</script></body></html>`,
			"Title\n\nVisible"},
		{"whitespace collapsed, blocks on their own lines",
			"<div>one\n\n   two</div><div>three</div><p>four  <span>five</span></p>six",
			"one two\nthree\n\nfour five\n\nsix"},
		{"links resolved",
			`<p>See <a href="../api/">the API</a>, <a href="https://other.org/x">other</a>, <a href="#top">top</a> and <a href="javascript:void(0)">js</a>.</p>`,
			"See [the API](https://example.com/api/), [other](https://other.org/x), top and js."},
		{"a link whose text is its target",
			`<a href="https://example.com/a">https://example.com/a</a>`,
			"https://example.com/a"},
		{"headings and lists",
			"<h2>Install</h2><ul><li>first</li><li>second <b>bold</b></li></ul><h3>Then</h3>",
			"## Install\n\n- first\n- second bold\n\n### Then"},
		{"pre kept as is",
			"<p>Code:</p><pre>if x {\n    y()\n}</pre><p>after</p>",
			"Code:\n\nif x {\n    y()\n}\n\nafter"},
		{"images by alt, br, hr",
			`<p>a<br>b <img src="x.png" alt="a cat"> c<img src="y.png"></p><hr><p>d</p>`,
			"a\nb [image: a cat] c\n\n---\n\nd"},
		{"tables",
			"<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>",
			"k | v\na | 1"},
		{"entities decoded",
			"<p>&lt;tag&gt; &amp; &eacute;&#233;</p>",
			"<tag> & éé"},
		{"broken markup",
			"<p>unclosed <b>bold<p>next",
			"unclosed bold\n\nnext"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := htmlText([]byte(c.in), base); got != c.want {
				t.Errorf("htmlText:\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}
