// Package toolsearch answers a tool search over the aggregator's routing state: it embeds the query once, matches
// it to skills of the taxonomy, asks the engine (package search) for the best tools of the allowed servers, and
// ranks them with a bounded skill boost and a tie-break by name (see Searcher.Search). It also owns what the
// ranking reads: the engine, the vector index the engine writes through (search/vector, in-process or Qdrant), the
// skill spaces (search/classify) and each tool's skill profile, computed from the vector the engine embedded.
//
// It is a package of its own for two reasons. The engine stays free of the vector backends and of the taxonomy:
// search ranks documents and knows neither Qdrant nor skills. And the ranking stays free of the actors: it reads the
// routing state through Catalog, a two-method view the caller implements over its snapshot (routing.RouteTable),
// so that it can be tested without starting a system and the actors keep only the mapping of ids to their entries.
package toolsearch
