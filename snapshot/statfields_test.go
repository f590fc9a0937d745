package snapshot

import (
	"reflect"
	"strings"
	"testing"
)

// TestStatFields: StatFields has every uint64 field of Stats, by its JSON
// name and in order, and each reads its own field.
func TestStatFields(t *testing.T) {
	typ := reflect.TypeOf(Stats{})
	var names []string
	var st Stats
	v := reflect.ValueOf(&st).Elem()
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Type.Kind() != reflect.Uint64 {
			continue
		}
		names = append(names, strings.Split(f.Tag.Get("json"), ",")[0])
		v.Field(i).SetUint(uint64(1000 + i))
	}
	var got []string
	for _, f := range StatFields {
		got = append(got, f.Name)
		i := -1
		for j := 0; j < typ.NumField(); j++ {
			if strings.Split(typ.Field(j).Tag.Get("json"), ",")[0] == f.Name {
				i = j
			}
		}
		if i < 0 || f.Get(&st) != uint64(1000+i) {
			t.Errorf("%s reads %d, want field %d's %d", f.Name, f.Get(&st), i, 1000+i)
		}
	}
	if !reflect.DeepEqual(got, names) {
		t.Errorf("StatFields\n %v\nwant Stats' uint64 fields\n %v", got, names)
	}
}
