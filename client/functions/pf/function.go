package pf

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
)

// handler is what every function shape Start accepts becomes: it gets the
// input message's payload and returns the output payload (nil for none).
type handler func(ctx context.Context, input []byte) ([]byte, error)

var (
	contextType = reflect.TypeFor[context.Context]()
	errorType   = reflect.TypeFor[error]()
	bytesType   = reflect.TypeFor[[]byte]()
)

// PanicError is the error a function that panicked is treated as having
// returned: the message counts as a user exception and the instance goes on
// (Magnetar extension: Pulsar's instance exits).
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("function panicked: %v", e.Value) }

// newHandler checks fn against the rules of Start and wraps it. The rules
// are Pulsar's; unlike Pulsar, a function breaking them is refused here,
// before the instance connects, instead of failing every message.
func newHandler(fn interface{}) (handler, error) {
	if fn == nil {
		return nil, errors.New("function is nil")
	}
	if f, ok := fn.(func(context.Context, []byte) ([]byte, error)); ok {
		if f == nil {
			return nil, errors.New("function is nil")
		}
		return recovering(f), nil
	}
	v := reflect.ValueOf(fn)
	t := v.Type()
	if t.Kind() != reflect.Func {
		return nil, fmt.Errorf("function kind %s is not func", t.Kind())
	}
	if v.IsNil() {
		return nil, errors.New("function is nil")
	}
	if t.IsVariadic() {
		return nil, fmt.Errorf("function %s is variadic", t)
	}

	var takesContext, takesInput bool
	switch t.NumIn() {
	case 0:
	case 1:
		takesContext = t.In(0).Implements(contextType)
		takesInput = !takesContext
	case 2:
		if !t.In(0).Implements(contextType) {
			return nil, fmt.Errorf("function takes two arguments, but the first is %s, not context.Context", t.In(0))
		}
		takesContext, takesInput = true, true
	default:
		return nil, fmt.Errorf("function may not take more than two arguments, but takes %d", t.NumIn())
	}
	if takesContext && !contextType.AssignableTo(t.In(0)) {
		return nil, fmt.Errorf("function's context argument has type %s; it must be context.Context", t.In(0))
	}
	if takesInput {
		if in := t.In(t.NumIn() - 1); !bytesType.AssignableTo(in) {
			return nil, fmt.Errorf("function's input argument has type %s; it must accept []byte", in)
		}
	}

	var returnsOutput bool
	switch t.NumOut() {
	case 0:
	case 1:
		if !t.Out(0).Implements(errorType) {
			return nil, fmt.Errorf("function returns a single value of type %s, which does not implement error", t.Out(0))
		}
	case 2:
		if !t.Out(1).Implements(errorType) {
			return nil, fmt.Errorf("function returns two values, but the second (%s) does not implement error", t.Out(1))
		}
		if o := t.Out(0); o.Kind() != reflect.Slice || o.Elem().Kind() != reflect.Uint8 {
			return nil, fmt.Errorf("function's output has type %s; it must be []byte", o)
		}
		returnsOutput = true
	default:
		return nil, fmt.Errorf("function may not return more than two values, but returns %d", t.NumOut())
	}

	return recovering(func(ctx context.Context, input []byte) ([]byte, error) {
		args := make([]reflect.Value, 0, 2)
		if takesContext {
			args = append(args, reflect.ValueOf(&ctx).Elem())
		}
		if takesInput {
			args = append(args, reflect.ValueOf(input).Convert(t.In(t.NumIn()-1)))
		}
		res := v.Call(args)
		var err error
		if len(res) > 0 {
			err = asError(res[len(res)-1])
		}
		var out []byte
		if returnsOutput && !res[0].IsNil() {
			out = res[0].Bytes()
		}
		return out, err
	}), nil
}

// asError converts a returned error value, treating a typed nil pointer
// (the classic (*MyError)(nil) in an error) as no error.
func asError(v reflect.Value) error {
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		if v.IsNil() {
			return nil
		}
	}
	err, _ := v.Interface().(error)
	return err
}

// recovering turns a panic of h into a *PanicError.
func recovering(h handler) handler {
	return func(ctx context.Context, input []byte) (out []byte, err error) {
		defer func() {
			if r := recover(); r != nil {
				out, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
			}
		}()
		return h(ctx, input)
	}
}
