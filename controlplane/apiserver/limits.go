package apiserver

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// checkTextLimits refuses a request whose free-text fields (display_name,
// description, reason, at any depth) are longer than cpv1.TextLimits,
// naming the field by its path ("cluster.display_name") and the limit.
func checkTextLimits(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	return textLimits(m.ProtoReflect(), "")
}

func textLimits(m protoreflect.Message, prefix string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := prefix + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = textLimits(l.Get(i).Message(), fmt.Sprintf("%s[%d].", path, i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				err = textLimits(mv.Message(), fmt.Sprintf("%s[%q].", path, k.String()))
				return err == nil
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			err = textLimits(v.Message(), path+".")
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap():
			if limit, ok := cpv1.TextLimits[string(fd.Name())]; ok {
				if n := utf8.RuneCountInString(v.String()); n > limit {
					err = invalid(path, "at most %d characters; got %d", limit, n)
				}
			}
		}
		return err == nil
	})
	return err
}
