package controlplanev1

// TextLimits bounds the free-text string fields of every request message,
// by field name, in characters (Unicode code points): display names 256,
// descriptions and credit-note reasons 2048. The API server refuses a
// longer value with INVALID_ARGUMENT naming the field and the limit; the
// OpenAPI 3 document states them as maxLength.
var TextLimits = map[string]int{
	"display_name": 256,
	"description":  2048,
	"reason":       2048,
}
