package protocol

import (
	"hash/crc32"

	"google.golang.org/protobuf/reflect/protoreflect"
)

func crc32cOf(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

func protoreflectNumber[T ~int32](v T) protoreflect.FieldNumber { return protoreflect.FieldNumber(v) }

// fillRequired sets every required field of m, recursively, to a non-zero
// value of its kind.
func fillRequired(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Cardinality() != protoreflect.Required {
			continue
		}
		switch fd.Kind() {
		case protoreflect.MessageKind, protoreflect.GroupKind:
			fillRequired(m.Mutable(fd).Message())
		case protoreflect.EnumKind:
			vals := fd.Enum().Values()
			m.Set(fd, protoreflect.ValueOfEnum(vals.Get(vals.Len()-1).Number()))
		case protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("s-"+string(fd.Name())))
		case protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte{1, 2}))
		case protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(-7))
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(-7))
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			m.Set(fd, protoreflect.ValueOfUint32(7))
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(1<<63+7))
		case protoreflect.DoubleKind:
			m.Set(fd, protoreflect.ValueOfFloat64(1.5))
		case protoreflect.FloatKind:
			m.Set(fd, protoreflect.ValueOfFloat32(1.5))
		}
	}
}
