package metadata

import (
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		p         string
		key, path bool
	}{
		{"/a", true, true},
		{"/a/b.c/d-e", true, true},
		{"/", false, true},
		{"", false, false},
		{"a", false, false},
		{"/a/", false, false},
		{"//a", false, false},
		{"/a//b", false, false},
	} {
		if err := ValidateKey(tc.p); (err == nil) != tc.key || (err != nil && !errors.Is(err, ErrInvalidKey)) {
			t.Errorf("ValidateKey(%q) = %v", tc.p, err)
		}
		if err := ValidatePath(tc.p); (err == nil) != tc.path {
			t.Errorf("ValidatePath(%q) = %v", tc.p, err)
		}
	}
}

func TestSubtreeAndChild(t *testing.T) {
	for _, tc := range []struct {
		key, p string
		in     bool
		child  string
	}{
		{"/a/b", "/a/b", true, ""},
		{"/a/b/c", "/a/b", true, "c"},
		{"/a/b/c/d", "/a/b", true, "c"},
		{"/a/bc", "/a/b", false, ""},
		{"/a/b.c", "/a/b", false, ""},
		{"/a", "/", true, "a"},
		{"/a/b", "/", true, "a"},
	} {
		if got := InSubtree(tc.key, tc.p); got != tc.in {
			t.Errorf("InSubtree(%q, %q) = %v", tc.key, tc.p, got)
		}
		if got := ChildName(tc.key, tc.p); got != tc.child {
			t.Errorf("ChildName(%q, %q) = %q, want %q", tc.key, tc.p, got, tc.child)
		}
	}
}
