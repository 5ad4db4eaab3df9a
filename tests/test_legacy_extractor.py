import pytest

from memwork.legacy.extractor import extract_rules


def _one(text):
    items = extract_rules([{"role": "user", "content": text}])
    assert len(items) == 1, items
    return items[0]


@pytest.mark.parametrize(
    ("text", "type_", "key", "value"),
    [
        ("My name is Alice.", "profile", "name", "Alice"),
        ("I live in Berlin", "profile", "location", "Berlin"),
        ("I'm 33 years old", "profile", "age", "33"),
        ("I am a software engineer", "profile", "occupation", "software engineer"),
        ("I want to learn Rust", "goal", None, "learn Rust"),
        ("I really like green tea!", "preference", "pref:green tea", "green tea"),
        ("I don't like coffee", "preference", "pref:coffee", "coffee"),
        ("Actually, my favorite color is blue", "preference", "favorite:color", "blue"),
        ("I have two cats", "fact", None, "two cats"),
        ("我叫小明", "profile", "name", "小明"),
        ("我住在上海。", "profile", "location", "上海"),
        ("我今年30岁", "profile", "age", "30"),
        ("我想学习日语", "goal", None, "学习日语"),
        ("我喜欢喝茶", "preference", "pref:喝茶", "喝茶"),
        ("我不喜欢下雨", "preference", "pref:下雨", "下雨"),
        ("我的猫是黑色的", "fact", "my:猫", "黑色的"),
    ],
)
def test_rules(text, type_, key, value):
    item = _one(text)
    assert (item.type, item.key, item.value) == (type_, key, value)
    assert item.source_index == 0 and item.metadata["extractor"] == "rules-v1"


@pytest.mark.parametrize(
    "text", ["What do I like?", "Do you like tea?", "我喜欢什么吗？", "I'm fine", "ok", ""]
)
def test_questions_and_chatter_give_nothing(text):
    assert extract_rules([{"role": "user", "content": text}]) == []


def test_only_user_messages_and_several_sentences():
    messages = [
        {"role": "assistant", "content": "My name is Assistant."},
        {"role": "user", "content": "My name is Bob. I live in Oslo!\n我喜欢跑步。"},
    ]
    items = extract_rules(messages)
    assert [i.content for i in items] == ["My name is Bob", "I live in Oslo", "我喜欢跑步"]
    assert {i.source_index for i in items} == {1}


def test_deterministic():
    messages = [{"role": "user", "content": "I like tea. I want to run a marathon. 我住在北京"}]
    assert extract_rules(messages) == extract_rules(messages)
