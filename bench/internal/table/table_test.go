package table

import (
	"bytes"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	tb := Table{Header: []string{"system", "msg/s"}}
	tb.Add("magnetar", "50000")
	tb.Add("nats", "49000")
	var txt, md bytes.Buffer
	tb.WriteText(&txt)
	tb.WriteMarkdown(&md)
	if got := strings.Count(txt.String(), "\n"); got != 3 {
		t.Fatalf("text has %d lines, want 3:\n%s", got, txt.String())
	}
	want := "| system | msg/s |\n| --- | ---: |\n| magnetar | 50000 |\n| nats | 49000 |\n"
	if md.String() != want {
		t.Fatalf("markdown:\n%s\nwant:\n%s", md.String(), want)
	}
}
