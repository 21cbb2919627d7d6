package pf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type namedBytes []byte

type myError struct{}

func (*myError) Error() string { return "my error" }

// extendedContext is a context with one more method: a function taking it
// cannot be called with a plain context.
type extendedContext interface {
	context.Context
	Extra()
}

func TestHandlerShapes(t *testing.T) {
	errBoom := errors.New("boom")
	var got []byte
	var gotCtx bool
	tests := []struct {
		name    string
		fn      interface{}
		wantOut string // "" for nil output
		wantErr error
	}{
		{"func()", func() { got = []byte("called") }, "", nil},
		{"func() error", func() error { return errBoom }, "", errBoom},
		{"func(input) error", func(in []byte) error { got = in; return nil }, "", nil},
		{"func() (output, error)", func() ([]byte, error) { return []byte("out"), nil }, "out", nil},
		{"func(input) (output, error)", func(in []byte) ([]byte, error) { return append(in, '!'), nil }, "hello!", nil},
		{"func(ctx) error", func(ctx context.Context) error { _, gotCtx = FromContext(ctx); return nil }, "", nil},
		{"func(ctx, input) error", func(ctx context.Context, in []byte) error { got = in; return nil }, "", nil},
		{"func(ctx) (output, error)", func(ctx context.Context) ([]byte, error) { return []byte("x"), nil }, "x", nil},
		{"func(ctx, input) (output, error)", func(_ context.Context, in []byte) ([]byte, error) { return in, nil }, "hello", nil},
		{"named byte types", func(in namedBytes) (namedBytes, error) { return append(in, '?'), nil }, "hello?", nil},
		{"interface{} input", func(in interface{}) error { got = in.([]byte); return nil }, "", nil},
		{"nil output", func([]byte) ([]byte, error) { return nil, nil }, "", nil},
		{"output with error", func([]byte) ([]byte, error) { return []byte("partial"), errBoom }, "partial", errBoom},
		{"typed nil error is no error", func() *myError { return nil }, "", nil},
		{"typed error", func() ([]byte, *myError) { return nil, &myError{} }, "", &myError{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, gotCtx = nil, false
			h, err := newHandler(tc.fn)
			if err != nil {
				t.Fatalf("newHandler: %v", err)
			}
			fc := &FunctionContext{}
			out, err := h(NewContext(context.Background(), fc), []byte("hello"))
			if string(out) != tc.wantOut {
				t.Errorf("output = %q, want %q", out, tc.wantOut)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("error = %v, want none", err)
			case tc.wantErr != nil && (err == nil || err.Error() != tc.wantErr.Error()):
				t.Errorf("error = %v, want %v", err, tc.wantErr)
			}
		})
	}
	// Spot checks of what the functions saw.
	h, _ := newHandler(func(ctx context.Context, in []byte) error { got = in; _, gotCtx = FromContext(ctx); return nil })
	h(NewContext(context.Background(), &FunctionContext{}), []byte("payload"))
	if string(got) != "payload" || !gotCtx {
		t.Errorf("function saw input %q, context carried FunctionContext %v", got, gotCtx)
	}
}

func TestHandlerRejected(t *testing.T) {
	var nilFunc func([]byte) error
	var nilFast func(context.Context, []byte) ([]byte, error)
	tests := []struct {
		name string
		fn   interface{}
		want string
	}{
		{"nil", nil, "function is nil"},
		{"nil func", nilFunc, "function is nil"},
		{"nil fast-path func", nilFast, "function is nil"},
		{"not a func", 42, "kind int is not func"},
		{"three arguments", func(context.Context, []byte, int) {}, "more than two arguments"},
		{"two arguments, first not a context", func([]byte, []byte) {}, "not context.Context"},
		{"context with more methods", func(extendedContext) {}, "must be context.Context"},
		{"string input", func(string) error { return nil }, "must accept []byte"},
		{"int input", func(context.Context, int) error { return nil }, "must accept []byte"},
		{"single non-error result", func() []byte { return nil }, "does not implement error"},
		{"second result not error", func() ([]byte, string) { return nil, "" }, "does not implement error"},
		{"string output", func() (string, error) { return "", nil }, "must be []byte"},
		{"three results", func() ([]byte, error, error) { return nil, nil, nil }, "more than two values"},
		{"variadic", func(...[]byte) {}, "variadic"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newHandler(tc.fn)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("newHandler error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestHandlerPanicIsAnError(t *testing.T) {
	for _, fn := range []interface{}{
		func([]byte) error { panic("oops") },
		func(context.Context, []byte) ([]byte, error) { panic("oops") },
	} {
		h, err := newHandler(fn)
		if err != nil {
			t.Fatal(err)
		}
		out, err := h(context.Background(), nil)
		var pe *PanicError
		if out != nil || !errors.As(err, &pe) || pe.Value != "oops" || len(pe.Stack) == 0 {
			t.Fatalf("got %q, %v; want a *PanicError carrying the value and a stack", out, err)
		}
	}
}
