package bench

import (
	"strconv"
	"strings"
	"sync"
)

// Fixture is one tool schema with arguments that satisfy it.
type Fixture struct {
	Name   string
	Schema []byte
	Args   []byte
}

// readSchema is a small, flat tool: the common case at a gateway.
const readSchema = `{
  "type": "object",
  "description": "Read a file, optionally a window of its lines.",
  "properties": {
    "path": {"type": "string", "description": "Absolute path of the file."},
    "offset": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based."},
    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read."}
  },
  "required": ["path"],
  "additionalProperties": false
}`

const readArgs = `{"path":"/work/main/internal/jsonstrict/parser.go","offset":120,"limit":80}`

// askUserQuestionSchema exercises nesting, items and a oneOf of a string or
// an object, as the interactive tools of an agent runtime do.
const askUserQuestionSchema = `{
  "type": "object",
  "description": "Ask the user a question and wait for the answer.",
  "properties": {
    "question": {"type": "string", "description": "The question, one sentence."},
    "options": {
      "type": "array",
      "description": "Suggested answers.",
      "items": {
        "description": "A plain label, or a label with a value and a description.",
        "oneOf": [
          {"type": "string"},
          {
            "type": "object",
            "properties": {
              "label": {"type": "string"},
              "value": {"type": "string"},
              "description": {"type": "string"}
            },
            "required": ["label"]
          }
        ]
      }
    },
    "allow_freeform": {"type": "boolean", "description": "Whether an answer outside the options is accepted."},
    "placeholder": {"type": "string"},
    "timeout_ms": {"type": "integer", "minimum": 1000}
  },
  "required": ["question"],
  "additionalProperties": false
}`

const askUserQuestionArgs = `{"question":"Which database should the migration target?",` +
	`"options":["PostgreSQL 16",` +
	`{"label":"MySQL 8","value":"mysql8","description":"Keeps the current replication setup."},` +
	`"SQLite (single node only)",` +
	`{"label":"Decide later","value":"defer"}],` +
	`"allow_freeform":true,"placeholder":"Or name another engine","timeout_ms":120000}`

// memorySchema is a knowledge-graph write of many entities: large arguments
// with a closed object at every level.
const memorySchema = `{
  "type": "object",
  "properties": {
    "entities": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "entityType": {"type": "string"},
          "observations": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["name", "entityType", "observations"],
        "additionalProperties": false
      }
    }
  },
  "required": ["entities"],
  "additionalProperties": false
}`

// MemoryEntities is how many entities the memory1000 arguments hold.
const MemoryEntities = 1000

// memoryArgs builds the memory1000 arguments deterministically, so every run
// measures the same bytes.
func memoryArgs(n int) []byte {
	types := []string{"person", "project", "service", "decision", "incident"}
	var b strings.Builder
	b.WriteString(`{"entities":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		id := strconv.Itoa(i)
		b.WriteString(`{"name":"entity-`)
		b.WriteString(id)
		b.WriteString(`","entityType":"`)
		b.WriteString(types[i%len(types)])
		b.WriteString(`","observations":["seen in run `)
		b.WriteString(strconv.Itoa(i * 7 % 997))
		b.WriteString(`","owns region `)
		b.WriteString(strconv.Itoa(i % 12))
		b.WriteString(`","terse"]}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

var fixtures = sync.OnceValue(func() []Fixture {
	return []Fixture{
		{Name: "ask_user_question", Schema: []byte(askUserQuestionSchema), Args: []byte(askUserQuestionArgs)},
		{Name: "read", Schema: []byte(readSchema), Args: []byte(readArgs)},
		{Name: "memory1000", Schema: []byte(memorySchema), Args: memoryArgs(MemoryEntities)},
	}
})

// Fixtures returns the benchmark fixtures in a fixed order. The slices are
// shared: callers must not modify them.
func Fixtures() []Fixture { return fixtures() }
