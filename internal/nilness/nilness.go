// Package nilness tells whether a value held in an interface is nil,
// typed nils included, so that the packages of this module reject a
// (*T)(nil) dependency exactly as they reject a plain nil one instead of
// panicking on its first method call.
package nilness

import "reflect"

// IsNil reports whether v is nil: the nil interface, or a nil pointer,
// map, slice, func, channel or unsafe.Pointer held in an interface
// (var s *Store; IsNil(s) is true although s != nil as an interface).
// Values of other kinds — structs, numbers, strings — are never nil.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan,
		reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
