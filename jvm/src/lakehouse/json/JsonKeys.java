package lakehouse.json;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The number of keys in a JSON object's text, counted in one pass over its bytes, or -1
 * where the text is not one object in the subset whose typed reading Spark's lenient
 * {@code from_json} gets right.
 *
 * <p>Silver compares the count with the fields {@code from_json} read: equal counts mean no
 * key repeated, none unknown and none of a type the schema could not read. -1 means: a key
 * spelled with an escape, a value of a listed string field that is not a string, anything
 * after the object, nesting deeper than 16, or text that is not JSON. Such records go to
 * the protocol's own parser in Python, so -1 costs speed, never a different answer.
 *
 * <p>Arguments: the value's bytes (UTF-8) and the comma-separated names of the fields whose
 * values must be strings.
 */
public final class JsonKeys implements UDF2<byte[], String, Integer> {
  private static final int MAX_DEPTH = 16;
  private static final int NOT_PLAIN = -1;

  private String lastNames;
  private byte[][] stringFields;

  @Override
  public Integer call(byte[] text, String names) {
    if (text == null) {
      return null;
    }
    if (!names.equals(lastNames)) {
      lastNames = names;
      stringFields =
          Arrays.stream(names.split(","))
              .map(n -> n.getBytes(StandardCharsets.UTF_8))
              .toArray(byte[][]::new);
    }
    return new Scan(text, stringFields).object();
  }

  /** One pass over one text; each method returns the next position, or -1. */
  private static final class Scan {
    private final byte[] text;
    private final byte[][] stringFields;
    private int keys;

    Scan(byte[] text, byte[][] stringFields) {
      this.text = text;
      this.stringFields = stringFields;
    }

    int object() {
      int at = space(0);
      if (at >= text.length || text[at] != '{') {
        return NOT_PLAIN;
      }
      at = value(at, 0);
      if (at < 0 || space(at) != text.length) {
        return NOT_PLAIN;
      }
      return keys;
    }

    private int space(int at) {
      while (at < text.length
          && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) {
        at++;
      }
      return at;
    }

    private int value(int at, int depth) {
      if (at >= text.length || depth > MAX_DEPTH) {
        return NOT_PLAIN;
      }
      switch (text[at]) {
        case '{':
          return members(at + 1, depth + 1);
        case '[':
          return elements(at + 1, depth + 1);
        case '"':
          return string(at);
        default:
          return scalar(at);
      }
    }

    private int members(int at, int depth) {
      at = space(at);
      if (at < text.length && text[at] == '}') {
        return at + 1;
      }
      while (true) {
        if (at >= text.length || text[at] != '"') {
          return NOT_PLAIN;
        }
        int nameStart = at + 1;
        int nameEnd = string(at);
        if (nameEnd < 0 || indexOf('\\', nameStart, nameEnd) >= 0) {
          return NOT_PLAIN;
        }
        at = space(nameEnd);
        if (at >= text.length || text[at] != ':') {
          return NOT_PLAIN;
        }
        keys++;
        at = space(at + 1);
        if (at < text.length && text[at] != '"' && isStringField(nameStart, nameEnd - 1)) {
          return NOT_PLAIN;
        }
        at = value(at, depth);
        if (at < 0) {
          return NOT_PLAIN;
        }
        at = space(at);
        if (at < text.length && text[at] == ',') {
          at = space(at + 1);
        } else if (at < text.length && text[at] == '}') {
          return at + 1;
        } else {
          return NOT_PLAIN;
        }
      }
    }

    private int elements(int at, int depth) {
      at = space(at);
      if (at < text.length && text[at] == ']') {
        return at + 1;
      }
      while (true) {
        at = value(at, depth);
        if (at < 0) {
          return NOT_PLAIN;
        }
        at = space(at);
        if (at < text.length && text[at] == ',') {
          at = space(at + 1);
        } else if (at < text.length && text[at] == ']') {
          return at + 1;
        } else {
          return NOT_PLAIN;
        }
      }
    }

    /** The position after the string opening at {@code at}. */
    private int string(int at) {
      for (int i = at + 1; i < text.length; i++) {
        if (text[i] == '\\') {
          i++;
        } else if (text[i] == '"') {
          return i + 1;
        }
      }
      return NOT_PLAIN;
    }

    /** A number or literal: its syntax is from_json's to judge; here only where it ends. */
    private int scalar(int at) {
      int end = at;
      while (end < text.length) {
        byte b = text[end];
        if (b == ',' || b == '}' || b == ']' || b == ' ' || b == '\t' || b == '\n' || b == '\r') {
          break;
        }
        if (b == '"' || b == '{' || b == '[' || b == ':') {
          return NOT_PLAIN;
        }
        end++;
      }
      return end == at ? NOT_PLAIN : end;
    }

    private int indexOf(char c, int from, int to) {
      for (int i = from; i < to; i++) {
        if (text[i] == c) {
          return i;
        }
      }
      return -1;
    }

    private boolean isStringField(int from, int to) {
      for (byte[] name : stringFields) {
        if (name.length == to - from && Arrays.equals(name, 0, name.length, text, from, to)) {
          return true;
        }
      }
      return false;
    }
  }
}
