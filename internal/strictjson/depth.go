package strictjson

// NestedAtMost reports whether JSON data nests objects and arrays at most max deep (brackets inside strings do not
// count). The fast paths check it before decoding what a client or a backend sent: the go-sdk refuses messages
// nested deeper than its limit, and they must refuse the same ones.
func NestedAtMost(data []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case inString && b == '"':
			inString = false
		case inString:
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > max {
				return false
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return true
}
