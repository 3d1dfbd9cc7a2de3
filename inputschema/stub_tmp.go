package inputschema

type node struct{}

func compileBytes(data []byte, l Limits) (*Schema, error) { panic("TODO") }
func compileValue(v any, l Limits) (*Schema, error)       { panic("TODO") }
func (s *Schema) validateValue(args any, all bool) error  { panic("TODO") }
func (s *Schema) validateJSON(args []byte, all bool) error { panic("TODO") }
