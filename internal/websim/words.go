package websim

// Word lists for host names, titles and body text. They are plain ASCII so
// that generated names need no escaping in URLs or HTML.

var adjectives = [...]string{
	"amber", "ancient", "autumn", "bitter", "blue", "bold", "brave", "bright",
	"broad", "calm", "clever", "cold", "copper", "crimson", "crisp", "dark",
	"deep", "distant", "dry", "eager", "early", "electric", "empty", "fair",
	"fast", "fierce", "floral", "foggy", "free", "gentle", "golden", "grand",
	"green", "hidden", "hollow", "honest", "humble", "icy", "iron", "jade",
	"keen", "late", "lazy", "little", "lively", "lone", "lucky", "mellow",
	"misty", "modern", "noble", "north", "odd", "old", "pale", "plain",
	"proud", "quiet", "rapid", "red", "rough", "round", "royal", "rustic",
	"sandy", "silent", "silver", "simple", "sleepy", "small", "solar", "south",
	"steady", "still", "stone", "sunny", "swift", "tall", "tidy", "twin",
	"urban", "velvet", "vivid", "warm", "west", "wild", "windy", "wise",
	"young", "zesty",
}

var nouns = [...]string{
	"acorn", "anchor", "arrow", "badger", "bay", "beacon", "bear", "bell",
	"birch", "bridge", "brook", "canyon", "castle", "cedar", "cliff", "cloud",
	"comet", "coral", "cove", "crane", "creek", "crow", "dawn", "delta",
	"dune", "eagle", "ember", "falcon", "fern", "field", "finch", "fjord",
	"flame", "forest", "fox", "garden", "glade", "glen", "grove", "harbor",
	"hawk", "heron", "hill", "island", "lake", "lantern", "leaf", "lily",
	"lion", "maple", "marsh", "meadow", "mesa", "mill", "moon", "moss",
	"oak", "orchard", "otter", "owl", "peak", "pebble", "pine", "pond",
	"prairie", "quarry", "rain", "raven", "reef", "ridge", "river", "robin",
	"rock", "sage", "shore", "sky", "spark", "spring", "spruce", "star",
	"stone", "storm", "summit", "swan", "thistle", "thunder", "tide", "tower",
	"trail", "valley", "willow", "wind", "wolf", "wren",
}

// sectionNames name the top-level sections of content hosts. Words that
// features use as path prefixes (calendar, shop, store, private, static,
// files, api, data, moved, old, reports, print, a) are deliberately absent.
var sectionNames = [...]string{
	"news", "blog", "guides", "products", "events", "people", "research",
	"docs", "reviews", "recipes", "projects", "stories", "travel", "science",
	"music", "history", "sports", "gallery", "learn", "community",
}

var words = [...]string{
	"the", "of", "and", "a", "to", "in", "is", "that", "for", "it", "as", "with",
	"was", "on", "be", "at", "by", "this", "from", "or", "an", "but", "not", "are",
	"which", "all", "were", "when", "we", "there", "can", "their", "has", "more",
	"if", "will", "each", "about", "how", "up", "out", "them", "then", "she",
	"many", "some", "so", "these", "would", "other", "into", "her", "two", "like",
	"him", "see", "time", "could", "no", "make", "than", "first", "been", "its",
	"who", "now", "people", "my", "made", "over", "did", "down", "only", "way",
	"find", "use", "may", "water", "long", "little", "very", "after", "words",
	"called", "just", "where", "most", "know", "get", "through", "back", "much",
	"before", "go", "good", "new", "write", "our", "used", "me", "man", "any",
	"day", "same", "right", "look", "think", "also", "around", "another", "came",
	"come", "work", "three", "word", "must", "because", "does", "part", "even",
	"place", "well", "such", "here", "take", "why", "things", "help", "put",
	"years", "different", "away", "again", "off", "went", "old", "number",
	"great", "tell", "men", "say", "small", "every", "found", "still", "between",
	"name", "should", "home", "big", "give", "air", "line", "set", "own", "under",
	"read", "last", "never", "us", "left", "end", "along", "while", "might",
	"next", "sound", "below", "saw", "something", "thought", "both", "few",
	"those", "always", "show", "large", "often", "together", "asked", "house",
	"world", "going", "want", "school", "important", "until", "form", "food",
	"keep", "children", "feet", "land", "side", "without", "boy", "once",
	"animals", "life", "enough", "took", "sometimes", "four", "head", "above",
	"kind", "began", "almost", "live", "page", "got", "earth", "need", "far",
	"hand", "high", "year", "mother", "light", "parts", "country", "father",
	"let", "night", "following", "picture", "being", "study", "second", "eyes",
	"soon", "times", "story", "boys", "since", "white", "days", "ever", "paper",
	"hard", "near", "sentence", "better", "best", "across", "during", "today",
	"others", "however", "sure", "means", "knew", "try", "told", "young",
	"miles", "sun", "ways", "thing", "whole", "hear", "example", "heard",
	"several", "change", "answer", "room", "sea", "against", "top", "turned",
	"learn", "point", "city", "play", "toward", "five", "using", "himself",
	"usually", "river", "garden", "market", "village", "bridge", "winter",
	"summer", "harvest", "music", "library", "museum", "journey", "letter",
	"machine", "engine", "season", "weather", "mountain", "island", "forest",
	"record", "archive", "history", "question", "signal", "method", "pattern",
}

// japaneseText is the body of the Shift_JIS page: common words so that a
// decoder error shows as obvious mojibake.
const japaneseText = "日本語のページです。東京、大阪、京都。ウェブアーカイブの試験用の文章。"

// latin1Text uses characters that exist in ISO-8859-1 but encode differently
// in UTF-8, so a crawler that ignores the declared charset garbles them.
const latin1Text = "Café crème, naïve façade, smørrebrød, Ørsted, señor, Grüße, ½ × ¾ ± °."
